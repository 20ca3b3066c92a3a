"""Lossless resume: the real ``cua-stream trainer`` (tiny model, real broker) is killed with SIGKILL at
random moments while it trains 24 groups, and restarted each time. The log must then hold every step
once, every group trained exactly once, and every policy version once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import (
    CallKind,
    GroupDropped,
    Logprobs,
    PolicyVersion,
    Reward,
    ScoreEvent,
    TokenIds,
    TrainStep,
    TurnEvent,
)
from cua_stream.topics import POLICY, SCORES, TRAIN_STEPS, TURNS
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]

RUN, GROUPS, GROUP_SIZE, PER_STEP = "resume-run", 24, 2, 2
STEPS = GROUPS // PER_STEP


def episode_records(group: int, episode: int) -> list[TurnEvent | ScoreEvent]:
    """Two turns of one episode (as the gateway records them) and its score."""
    ids = {"run_id": RUN, "group_id": f"{RUN}-g{group:06d}", "episode_id": f"{RUN}-g{group:06d}-e{episode}"}
    rng = random.Random(group * 10 + episode)
    turns = []
    for seq in range(2):
        prompt = [rng.randrange(100, 5000) for _ in range(6 if seq == 0 else 3)]
        completion = [rng.randrange(100, 5000) for _ in range(4)]
        turns.append(
            TurnEvent(
                **ids,
                seq=seq,
                call_id=f"{ids['episode_id']}-c{seq}",
                parent_call_id=None if seq == 0 else f"{ids['episode_id']}-c0",
                kind=CallKind.AGENT_TURN,
                prompt_ids=TokenIds(prompt),
                completion_ids=TokenIds(completion),
                completion_logprobs=Logprobs([-8.0] * 4),
                policy_version=0,
                finish_reason="stop",
                started_at=0.0,
            )
        )
    verdict = Reward(value=float((group + episode) % 2))
    return [*turns, ScoreEvent(**ids, verdict=verdict, policy_version=0, scored_at=0.0)]


async def publish_episodes(config: BusConfig) -> None:
    async with EventProducer(config) as producer:
        for group in range(GROUPS):
            for episode in range(GROUP_SIZE):
                for event in episode_records(group, episode):
                    await producer.send(SCORES if isinstance(event, ScoreEvent) else TURNS, event)
        await producer.flush()


def trainer_cmd(config: BusConfig, model: Path, home: Path) -> list[str]:
    return [
        sys.executable, "-m", "cua_stream", "trainer",
        "--run-id", RUN, "--model-path", str(model),
        "--group-size", str(GROUP_SIZE), "--groups-per-step", str(PER_STEP),
        "--max-staleness", "1000", "--max-steps", str(STEPS),
        "--checkpoint-dir", str(home / "ckpt"), "--blob-dir", str(home / "blobs"),
        "--bootstrap", config.bootstrap_servers, "--prefix", config.topic_prefix,
    ]  # fmt: skip


def checkpointed_step(home: Path) -> int:
    path = home / "ckpt" / "checkpoint.json"
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def test_kill_9_at_random_moments_loses_no_group_and_trains_none_twice(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    anyio.run(publish_episodes, bus_config)
    cmd = trainer_cmd(bus_config, tiny_model_dir, tmp_path)
    rng = random.Random(20261201)
    kills = []
    step_s = 0.5  # until measured: a step and its commit took about a second here
    for target in sorted(rng.sample(range(1, STEPS - 3), 3)):
        # Kill once the checkpoint reached step ``target``, then a random moment later: inside the next
        # step, its weight save, its checkpoint write or its publishing. The moment is a fraction of a
        # step as this machine runs them, so it lands there however fast or slow the machine is.
        env = os.environ.copy()
        with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env) as p:
            deadline = time.monotonic() + 300
            first_seen: dict[int, float] = {}  # checkpointed step -> when this loop first saw it
            while (
                (at := checkpointed_step(tmp_path)) < target
                and p.poll() is None
                and time.monotonic() < deadline
            ):
                first_seen.setdefault(at, time.monotonic())
                time.sleep(0.02)
            if len(first_seen) >= 2 and at > max(first_seen):  # steps that began and ended in this process
                step_s = (time.monotonic() - first_seen[max(first_seen)]) / (at - max(first_seen))
            time.sleep(rng.uniform(0.0, 1.0) * step_s)
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills.append((target, checkpointed_step(tmp_path)))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(0 < at < STEPS for _, at in kills), kills  # every kill landed mid-run

    async def read() -> tuple[list[TrainStep], list[GroupDropped], list[PolicyVersion]]:
        records = [d.event async for d in scan(bus_config, TRAIN_STEPS)]
        versions = [d.event async for d in scan(bus_config, POLICY)]
        steps = [r for r in records if isinstance(r, TrainStep)]
        drops = [r for r in records if isinstance(r, GroupDropped)]
        return steps, drops, versions  # type: ignore[return-value]

    steps, drops, versions = anyio.run(read)
    assert drops == [], drops
    assert sorted(s.step for s in steps) == list(range(1, STEPS + 1)), kills
    trained = Counter(g for s in steps for g in s.group_ids)
    assert set(trained) == {f"{RUN}-g{k:06d}" for k in range(GROUPS)} and set(trained.values()) == {1}, kills
    assert sorted(v.version for v in versions) == list(range(1, STEPS + 1))
    assert all(s.metrics["grad_norm"] > 0 for s in steps)
