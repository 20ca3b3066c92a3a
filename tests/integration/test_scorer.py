"""The scorer against a real Apache Kafka broker: exactly one score per episode (duplicates, restarts,
kill -9), dead-lettering of malformed outcomes, and the metrics endpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import httpx
import pytest
from aiokafka import AIOKafkaProducer

from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import read_events, scan
from cua_stream.config import BusConfig
from cua_stream.events import (
    DeadLetter,
    Discard,
    ExceptionRecord,
    OutcomeEvent,
    Phase,
    Reward,
    ScoreEvent,
    encode,
    headers_for,
)
from cua_stream.topics import DLQ, OUTCOMES, SCORES
from tests.conftest import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

LOST = ExceptionRecord(
    type="RuntimeRequestError",
    message="screenshot failed",
    phase=Phase.AGENT,
    module="harbor.agents.computer_1.runtime",
)
OVERFLOW = ExceptionRecord(
    type="ContextLengthExceededError", message="", phase=Phase.AGENT, module="harbor.llms.base"
)


def outcome(i: int) -> OutcomeEvent:
    """Episode i of a stream with a mix of verdicts: reward 1, reward 0 (overflow), discard (lost)."""
    kind = i % 3
    return OutcomeEvent(
        run_id="run-1",
        group_id=f"g{i // 8}",
        episode_id=f"ep-{i:04d}",
        task="open-settings",
        policy_version=i // 100,
        agent_started=True,
        exception=(None, OVERFLOW, LOST)[kind],
        rewards={"reward": 1.0} if kind == 0 else None,
        started_at=float(i),
        finished_at=float(i) + 1,
    )


def expected_verdict(i: int) -> Reward | Discard:
    return (Reward(value=1.0), Reward(value=0.0, reason="context_overflow"), Discard(reason="sandbox_lost"))[
        i % 3
    ]


async def publish(config: BusConfig, events: list[OutcomeEvent]) -> None:
    async with EventProducer(config) as producer:
        for ev in events:
            await producer.send(OUTCOMES, ev)
        await producer.flush()


async def committed_scores(config: BusConfig) -> list[ScoreEvent]:
    return [d.event async for d in scan(config, SCORES)]  # read_committed


async def count_scored(config: BusConfig) -> int:
    return len({s.episode_id for s in await committed_scores(config)})


def scorer_config(bus: BusConfig, **kw: object) -> ScorerConfig:
    return ScorerConfig(bus=bus, **kw)  # type: ignore[arg-type]


async def test_an_outcome_delivered_twice_gets_one_score(bus_config: BusConfig) -> None:
    firsts = [outcome(i) for i in range(30)]
    await publish(bus_config, firsts + firsts[:10])  # ten delivered twice
    scorer = Scorer(scorer_config(bus_config, metrics_port=0))
    stop = anyio.Event()

    async def all_consumed() -> bool:
        return scorer.processor.stats.consumed == 40

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            port = await tg.start(lambda task_status: scorer.run(stop=stop, task_status=task_status))
            await wait_until(all_consumed)
            async with httpx.AsyncClient() as http:
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            stop.set()
    scores = await committed_scores(bus_config)
    assert sorted(s.episode_id for s in scores) == [f"ep-{i:04d}" for i in range(30)]
    assert all(s.verdict == expected_verdict(int(s.episode_id[3:])) for s in scores)
    assert 'cua_scorer_verdicts_total{verdict="discard",reason="sandbox_lost",rule="sandbox_lost"} 10' in text
    assert "cua_scorer_duplicate_outcomes_total 10" in text

    # A fresh instance (same transactional id) sees the same episodes again, as after a producer retry or
    # a replay: its dedup state comes from the committed scores, so it scores none of them twice.
    await publish(bus_config, [*firsts[5:15], outcome(30)])
    again = Scorer(scorer_config(bus_config))
    with anyio.fail_after(60):
        await again.run(stop_after=11)
    scores = await committed_scores(bus_config)
    assert Counter(s.episode_id for s in scores).most_common(1)[0][1] == 1
    assert len(scores) == 31
    assert again.metrics.duplicates.value() == 10


async def test_a_malformed_outcome_is_dead_lettered_and_scoring_carries_on(bus_config: BusConfig) -> None:
    topic = bus_config.topics().name_of(OUTCOMES)
    wrong_type = ScoreEvent(
        run_id="run-1",
        group_id="g0",
        episode_id="x",
        verdict=Discard(reason="x"),
        policy_version=0,
        scored_at=0,
    )
    raw = AIOKafkaProducer(bootstrap_servers=bus_config.bootstrap_servers)
    await raw.start()
    try:
        await publish(bus_config, [outcome(0)])
        for value, headers in [
            (b"\xc1 not msgpack", [("run_id", b"run-1")]),
            (encode(outcome(1)), [("schema", b"cua-stream/99")]),
            (encode(wrong_type), headers_for(wrong_type)),
        ]:
            await raw.send_and_wait(topic, value, key=b"g0", headers=headers)
    finally:
        await raw.stop()
    await publish(bus_config, [outcome(2)])
    scorer = Scorer(scorer_config(bus_config))
    with anyio.fail_after(60):
        await scorer.run(stop_after=5)
    assert sorted(s.episode_id for s in await committed_scores(bus_config)) == ["ep-0000", "ep-0002"]
    letters = [d.event for d in await read_events(bus_config, DLQ, 3)]
    assert all(isinstance(x, DeadLetter) for x in letters)
    assert [x.reason for x in letters] == ["undecodable", "unknown_schema", "unexpected_type"]
    assert {x.source_topic for x in letters} == {topic}
    assert scorer.processor.stats.dead_lettered == 3
    assert "cua_scorer_dead_letters_total 3" in scorer.render_metrics()


# ---------------------------------------------------------------------------------------------------
# kill -9


async def _at_least(config: BusConfig, n: int) -> bool:
    return await count_scored(config) >= n


N_EPISODES = 1000
KILLS = 5
SEED = 20260101


def spawn_scorer(bus: BusConfig, log: Path) -> subprocess.Popen[bytes]:
    """`cua-stream scorer` as a real process (the installed entry point), logging to ``log``."""
    exe = Path(sys.executable).with_name("cua-stream")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "cua_stream"]
    env = {**os.environ, "CUA_EPISODE_PARTITIONS": str(bus.episode_partitions), "CUA_SCORER_MAX_BATCH": "25"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [*argv, "scorer", "--bootstrap", bus.bootstrap_servers, "--prefix", bus.topic_prefix],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


async def consumed(config: BusConfig, records: int) -> bool:
    """Whether the scorer's group has committed past ``records`` outcomes (every one on the topic)."""
    async with TopicAdmin(config) as admin:
        return sum((await admin.committed(scorer_config(config).group)).values()) >= records


@pytest.mark.slow
async def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
    bus_config: BusConfig, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    episodes = [outcome(i) for i in range(N_EPISODES)]
    redelivered = rng.sample(episodes, 60)  # a producer retrying after a lost ack
    stream = episodes + redelivered
    rng.shuffle(stream)
    log = tmp_path / "scorer.log"
    kills: list[str] = []
    mid: list[int] = []
    # Each kill comes once the scorer has scored past a random point of the stream (and a random moment
    # more): mid-stream by construction, however long this machine takes to start a scorer.
    marks = sorted(rng.sample(range(50, N_EPISODES - 100), KILLS))

    async def feed() -> None:  # the stream arrives while the scorer is being killed
        for start in range(0, len(stream), 25):
            await publish(bus_config, stream[start : start + 25])
            await anyio.sleep(0.35)

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            for k, mark in enumerate(marks):
                proc = spawn_scorer(bus_config, log)
                await wait_until(lambda mark=mark: _at_least(bus_config, mark), poll_s=0.1)
                delay = rng.uniform(0.0, 0.5)
                await anyio.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                await anyio.to_thread.run_sync(proc.wait)
                done = await count_scored(bus_config)
                mid.append(done)
                kills.append(f"kill {k + 1}: past {mark} scored, {delay:.2f}s later: {done} episodes scored")
                print(kills[-1], flush=True)

        # The last restart runs to the end of the stream, then stops on SIGTERM.
        proc = spawn_scorer(bus_config, log)
        await wait_until(lambda: _at_least(bus_config, N_EPISODES), poll_s=0.5)
        # every outcome consumed and committed (a duplicate's score is committed with its offset)
        await wait_until(lambda: consumed(bus_config, len(stream)), poll_s=0.5)
        proc.send_signal(signal.SIGTERM)
        code = await anyio.to_thread.run_sync(proc.wait)

    scores = await committed_scores(bus_config)
    ids = Counter(s.episode_id for s in scores)
    print(f"{KILLS} kills, {KILLS} restarts; {len(scores)} committed scores, {len(ids)} distinct episodes")
    assert code == 0, log.read_text()[-3000:]
    assert len(scores) == N_EPISODES
    assert set(ids) == {e.episode_id for e in episodes}
    assert all(s.verdict == expected_verdict(int(s.episode_id[3:])) for s in scores)
    assert any(n < N_EPISODES for n in mid), kills  # some kill left episodes to score after it
