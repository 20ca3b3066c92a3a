"""Every group the trainer does not train is published with its reason and counted: a discarded episode
drops its group, a group with equal rewards is filtered, a stale one is bounded off, one whose episodes
never all finish times out; the rest train. Synthetic records through the real broker, the tiny model."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import Discard, GroupDropped, Reward, ScoreEvent, TrainStep
from cua_stream.topics import SCORES, TRAIN_STEPS, TURNS
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_trainer_resume import RUN, episode_records

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.anyio]


async def publish(config: BusConfig) -> None:
    """Groups 0-1 train; 2 has a discard; 3 has equal rewards; 4 was sampled by v0 while the trainer is at
    v5 (its checkpoint says so); 5 is missing an episode's score (it times out)."""
    async with EventProducer(config) as producer:
        for group in range(6):
            for episode in range(2):
                turns, score = episode_records(group, episode)[:-1], episode_records(group, episode)[-1]
                for turn in turns:
                    version = 0 if group == 4 else 5
                    await producer.send(TURNS, msgspec.structs.replace(turn, policy_version=version))
                assert isinstance(score, ScoreEvent)
                if group == 2 and episode == 1:
                    score = msgspec.structs.replace(score, verdict=Discard(reason="sandbox_lost"))
                if group == 3:
                    score = msgspec.structs.replace(score, verdict=Reward(value=1.0))
                if group == 5 and episode == 1:
                    continue
                await producer.send(SCORES, score)
        await producer.flush()


async def test_each_drop_is_published_with_its_reason_and_counted(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    await publish(bus_config)
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    # the trainer is at policy version 5 (as after five steps): group 4's tokens are five versions old
    (checkpoints / ckpt.FILE).write_bytes(msgspec.json.encode(ckpt.Checkpoint(run_id=RUN, version=5, step=5)))
    config = TrainerConfig(
        run_id=RUN,
        model_path=str(tiny_model_dir),
        group_size=2,
        groups_per_step=2,
        max_staleness=1,
        filter_zero_variance=True,
        group_timeout_s=3.0,
        checkpoint_dir=str(checkpoints),
        blob_dir=str(tmp_path / "blobs"),
        bus=bus_config,
    )
    trainer = Trainer(config)
    stop = anyio.Event()
    reasons = {"discarded", "zero_variance", "stale", "timeout"}

    async def all_seen() -> None:
        for _ in iter(int, 1):  # until every expected decision is in
            if trainer.state.step == 6 and all(trainer.metrics.drops.value(reason=r) == 1 for r in reasons):
                stop.set()
                return
            await anyio.sleep(0.2)

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(all_seen)
            await trainer.run(stop=stop)
    records = [d.event async for d in scan(bus_config, TRAIN_STEPS)]
    steps = [r for r in records if isinstance(r, TrainStep)]
    drops = {r.group_id: (r.reason, r.detail) for r in records if isinstance(r, GroupDropped)}
    assert [(s.step, sorted(s.group_ids)) for s in steps] == [(6, [f"{RUN}-g000000", f"{RUN}-g000001"])]
    assert drops[f"{RUN}-g000002"] == ("discarded", "sandbox_lost")
    assert drops[f"{RUN}-g000003"][0] == "zero_variance"
    assert drops[f"{RUN}-g000004"][0] == "stale" and "v0 < v5 - 1" in drops[f"{RUN}-g000004"][1]
    assert drops[f"{RUN}-g000005"] == ("timeout", "1 of 2 episodes finished in time")
    assert len(drops) == 4  # each dropped group published once
    metrics = trainer.metrics.render()
    for reason in reasons:
        assert f'cua_trainer_groups_dropped_total{{reason="{reason}"}} 1' in metrics
