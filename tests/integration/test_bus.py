"""The bus against a real Apache Kafka broker."""

from __future__ import annotations

import time

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from cua_stream.bus.codec import Delivery
from cua_stream.bus.consumer import EventConsumer
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import read_events, scan
from cua_stream.bus.transaction import TransactionalProcessor
from cua_stream.config import BusConfig
from cua_stream.errors import BusUnavailable
from cua_stream.events import (
    CallKind,
    DeadLetter,
    Logprobs,
    OutcomeEvent,
    Reward,
    ScoreEvent,
    TokenIds,
    TurnEvent,
)
from cua_stream.topics import DLQ, OUTCOMES, SCORES, TURNS, TopicSpec

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def turn(i: int, group: str = "g0") -> TurnEvent:
    return TurnEvent(
        run_id="run-1",
        group_id=group,
        episode_id=f"ep-{i}",
        seq=i,
        call_id=f"c{i}",
        kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds(range(i, i + 5)),
        completion_ids=TokenIds([7, 8]),
        completion_logprobs=Logprobs([-0.1, -0.2]),
        policy_version=3,
        finish_reason="stop",
        started_at=time.time(),
    )


def outcome(i: int) -> OutcomeEvent:
    return OutcomeEvent(
        run_id="run-1",
        group_id=f"g{i % 3}",
        episode_id=f"ep-{i}",
        task="t",
        policy_version=0,
        agent_started=True,
        rewards={"reward": 1.0},
        started_at=0.0,
        finished_at=1.0,
    )


async def test_round_trip_with_headers(bus_config: BusConfig) -> None:
    sent = [turn(i, group=f"g{i % 2}") for i in range(6)]
    async with EventProducer(bus_config) as producer:
        for ev in sent:
            await producer.publish(TURNS, ev)
    got = await read_events(bus_config, TURNS, 6)
    assert sorted((d.event for d in got), key=lambda e: e.seq) == sent
    for d in got:
        headers = dict(d.headers)
        assert headers["schema"] == b"cua-stream/1"
        assert headers["type"] == b"turn"
        assert headers["run_id"] == b"run-1"
        assert headers["episode_id"] == d.event.episode_id.encode()
        assert headers["policy_version"] == b"3"
        assert d.key == d.event.group_id.encode()
    # key = group_id: one group's records share a partition
    by_group = {(d.event.group_id, d.partition) for d in got}
    assert len({g for g, _ in by_group}) == len(by_group)


async def test_group_resumes_from_committed_offset(bus_config: BusConfig) -> None:
    async with EventProducer(bus_config) as producer:
        for i in range(10):
            await producer.publish(TURNS, turn(i, group="same"))
        seen: list[int] = []

        async def handle(d: Delivery) -> None:
            seen.append(d.event.seq)

        async with EventConsumer(bus_config, [TURNS], group_id="resume", dead_letters=producer) as c:
            assert await c.run(handle, stop_after=4) == 4
        async with EventConsumer(bus_config, [TURNS], group_id="resume", dead_letters=producer) as c:
            assert await c.run(handle, stop_after=6) == 6
    assert seen == list(range(10))  # nothing lost, nothing repeated


async def test_garbage_goes_to_dlq_and_consumption_continues(bus_config: BusConfig) -> None:
    topic = bus_config.topics().name_of(TURNS)
    raw = AIOKafkaProducer(bootstrap_servers=bus_config.bootstrap_servers)
    await raw.start()
    async with EventProducer(bus_config) as producer:
        await producer.publish(TURNS, turn(0, group="k"))
        await raw.send_and_wait(
            topic, b"\xc1 not msgpack", key=b"k", headers=[("run_id", b"run-1")], partition=0
        )
        await raw.send_and_wait(topic, b"x", key=b"k", headers=[("schema", b"cua-stream/99")], partition=0)
        await raw.stop()
        await producer.publish(TURNS, turn(1, group="k"))
        handled: list[int] = []

        async def handle(d: Delivery) -> None:
            handled.append(d.event.seq)

        async with EventConsumer(bus_config, [TURNS], group_id="dlq", dead_letters=producer) as c:
            await c.run(handle, stop_after=2)
            assert c.dead_lettered == 2
    assert handled == [0, 1]
    letters = [d.event for d in await read_events(bus_config, DLQ, 2)]
    assert all(isinstance(x, DeadLetter) for x in letters)
    assert [x.reason for x in letters] == ["undecodable", "unknown_schema"]
    assert letters[0].value == b"\xc1 not msgpack" and letters[0].source_topic == topic
    assert letters[0].run_id == "run-1"
    assert letters[1].offset == letters[0].offset + 1


class ScoreAll:
    """A minimal transform: every outcome gets reward 1."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.restored: list[frozenset[int]] = []

    def apply(self, d: Delivery) -> list[tuple[TopicSpec, ScoreEvent]]:
        ev = d.event
        if ev.episode_id == self.fail_on:
            self.fail_on = None  # fail once, then succeed on the retry
            raise BusUnavailable("injected failure")  # retriable: the policy aborts, rewinds, retries
        score = ScoreEvent(
            run_id=ev.run_id,
            group_id=ev.group_id,
            episode_id=ev.episode_id,
            verdict=Reward(value=1.0),
            policy_version=ev.policy_version,
            scored_at=0.0,
        )
        return [(SCORES, score)]

    async def restore(self, partitions: frozenset[int]) -> None:
        self.restored.append(partitions)


async def test_transaction_commits_outputs_and_offsets_together(bus_config: BusConfig) -> None:
    async with EventProducer(bus_config) as producer:
        for i in range(12):
            await producer.publish(OUTCOMES, outcome(i))
    transform = ScoreAll(fail_on="ep-5")
    proc = TransactionalProcessor(
        bus_config, source=OUTCOMES, group_id="scorer", transactional_id="scorer-0", transform=transform
    )
    with anyio.fail_after(60):
        await proc.run(stop_after=12)
    assert proc.stats.aborts == 1 and len(transform.restored) >= 2  # assignment + rewind
    scores = [d.event async for d in scan(bus_config, SCORES)]
    assert sorted(s.episode_id for s in scores) == sorted(f"ep-{i}" for i in range(12))


async def test_aborted_transaction_is_invisible_to_read_committed(bus_config: BusConfig) -> None:
    topic = bus_config.topics().name_of(SCORES)
    async with EventProducer(bus_config, transactional_id="tx-visibility") as producer:
        kafka = producer.kafka
        committed = ScoreAll().apply(Delivery(outcome(1), "", 0, 0, None, b"", (), 0))[0][1]
        aborted = ScoreAll().apply(Delivery(outcome(2), "", 0, 0, None, b"", (), 0))[0][1]
        with pytest.raises(RuntimeError):
            async with kafka.transaction():
                await producer.send(SCORES, aborted)
                await kafka.flush()
                raise RuntimeError("abort")
        async with kafka.transaction():
            await producer.send(SCORES, committed)
    got = [d.event async for d in scan(bus_config, SCORES)]
    assert got == [committed]
    # the aborted record did reach the log: a read_uncommitted reader sees it
    from cua_stream.bus.reader import read_raw

    raw = [m async for m in read_raw(bus_config, topic, read_committed=False)]
    assert len(raw) == 2


async def test_rebalance_loses_nothing(bus_config: BusConfig) -> None:
    """A second member joins mid-stream: partitions move, processed offsets are committed on revoke,
    and every record is handled (at-least-once: a record in flight at the revoke may be handled twice).
    The members run until every record is handled, not for a fixed time: how long the group takes to
    form and rebalance is the broker's and the machine's business."""
    n = 60
    async with EventProducer(bus_config) as producer:
        for i in range(n):
            await producer.publish(TURNS, turn(i, group=f"g{i % 7}"))
        handled: list[int] = []
        some, every = anyio.Event(), anyio.Event()

        async def handle(d: Delivery) -> None:
            handled.append(d.event.seq)
            if len(handled) >= 10:
                some.set()
            if set(handled) == set(range(n)):
                every.set()
            await anyio.sleep(0.02)

        async def member(after: anyio.Event | None) -> None:
            if after is not None:
                await after.wait()
            async with (
                EventConsumer(
                    bus_config, [TURNS], group_id="rebalance", dead_letters=producer, max_batch=5
                ) as c,
                anyio.create_task_group() as running,
            ):
                running.start_soon(lambda: c.run(handle, commit_interval_s=0.1))
                await every.wait()
                running.cancel_scope.cancel()

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(member, None)
                tg.start_soon(member, some)  # joins once the first has handled some: mid-stream
    assert set(handled) == set(range(n))
    assert len(handled) - n <= 10, f"{len(handled) - n} duplicates"
