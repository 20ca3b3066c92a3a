"""The bus and the scorer under records a raw Kafka client can write, against the real broker: another
partitioner, poison pills, null header values, empty identities, and handlers that raise."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from cua_stream.bus.codec import Delivery
from cua_stream.bus.consumer import EventConsumer
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import Bound, read_events, read_raw, scan
from cua_stream.bus.transaction import TransactionalProcessor
from cua_stream.config import BusConfig
from cua_stream.events import DeadLetter, Event, OutcomeEvent, Reward, ScoreEvent, encode, headers_for
from cua_stream.replay import read_file, replay_to_file
from cua_stream.tap import follow
from cua_stream.topics import DLQ, OUTCOMES, SCORES, TopicSpec, partition_of

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def outcome(i: int, **over: object) -> OutcomeEvent:
    fields: dict = {
        "run_id": "run-1",
        "group_id": f"g{i}",
        "episode_id": f"ep-{i:03d}",
        "task": "t",
        "policy_version": 0,
        "agent_started": True,
        "rewards": {"reward": 1.0},
        "started_at": 0.0,
        "finished_at": 1.0,
    }
    fields.update(over)
    return OutcomeEvent(**fields)


async def raw_send(config: BusConfig, records: Sequence[tuple], **options: object) -> None:
    """Send (value, key, headers, partition) tuples to the outcome topic with a plain aiokafka client."""
    topic = config.topics().name_of(OUTCOMES)
    raw = AIOKafkaProducer(bootstrap_servers=config.bootstrap_servers, **options)
    await raw.start()
    try:
        for value, key, headers, partition in records:
            await raw.send_and_wait(topic, value, key=key, headers=headers, partition=partition)
    finally:
        await raw.stop()


async def scores_of(config: BusConfig) -> list[Delivery]:
    return [d async for d in scan(config, SCORES)]


async def score(config: BusConfig, n: int) -> Scorer:
    scorer = Scorer(ScorerConfig(bus=config))
    with anyio.fail_after(90):
        await scorer.run(stop_after=n)
    return scorer


async def test_exactly_once_holds_whatever_partitioner_the_outcome_producer_used(
    bus_config: BusConfig,
) -> None:
    n = bus_config.episode_partitions
    crc32 = [(i, zlib.crc32(f"g{i}".encode()) % n) for i in range(40)]
    moved = [(i, p) for i, p in crc32 if p != partition_of(f"g{i}".encode(), n)][:16]
    assert len(moved) == 16  # crc32 (librdkafka's default) puts these off their group's partition
    batch = [(encode(outcome(i)), f"g{i}".encode(), headers_for(outcome(i)), p) for i, p in moved]
    batch += [
        (encode(outcome(100 + i)), None, headers_for(outcome(100 + i)), i % n) for i in range(4)
    ]  # no key
    await raw_send(bus_config, batch)
    first = await score(bus_config, len(batch))
    # The same outcomes again, as a retrying foreign producer would send them (the null-key ones
    # elsewhere this time), to a fresh instance: its dedup state is rebuilt from the committed scores.
    again = [(v, k, h, (p + 1) % n if k is None else p) for v, k, h, p in batch]
    await raw_send(bus_config, again)
    second = await score(bus_config, len(again))
    scores = await scores_of(bus_config)
    assert len(scores) == 20 and max(Counter(d.event.episode_id for d in scores).values()) == 1
    for d in scores:  # each on its group's partition, where the group's turns are
        assert d.partition == partition_of(d.event.group_id.encode(), n)
    assert second.metrics.duplicates.value() == 20
    assert first.metrics.misrouted.value() >= 16


async def test_a_poison_pill_too_big_to_dead_letter_whole_is_trimmed_and_scoring_goes_on(
    bus_config: BusConfig,
) -> None:
    big_value = b"\x00garbage" * (12 * 1024 * 1024 // 8)  # 12 MiB, tiny once gzip-compressed
    big_key, key_value = b"k" * (3 * 1024 * 1024), b"v" * (3 * 1024 * 1024)
    await raw_send(
        bus_config,
        [
            (big_value, b"g1", [], 0),
            (key_value, big_key, [], 0),
            (encode(outcome(7)), b"g7", headers_for(outcome(7)), 0),
        ],
        compression_type="gzip",
        max_request_size=32 * 1024 * 1024,
    )
    scorer = await score(bus_config, 3)  # before: five aborts in a row, exit 1, forever
    assert [d.event.episode_id for d in await scores_of(bus_config)] == ["ep-007"]
    letters: list[DeadLetter] = [d.event for d in await read_events(bus_config, DLQ, 2)]  # type: ignore[misc]
    assert [(t.part, t.size) for t in letters[0].trimmed] == [("value", len(big_value))]
    assert {(t.part, t.size) for t in letters[1].trimmed} == {
        ("key", len(big_key)),
        ("value", len(key_value)),
    }
    assert scorer.processor.stats.dead_lettered == 2 and scorer.processor.stats.aborts == 0


async def test_a_record_with_200000_headers_is_dead_lettered_and_scoring_goes_on(
    bus_config: BusConfig,
) -> None:
    headers = [(f"h{i:06d}", b"v") for i in range(200_000)]  # ~2.4 MB of headers, small once gzipped
    await raw_send(
        bus_config,
        [
            (b"\x00not an outcome", b"g3", headers, 0),
            (encode(outcome(4)), b"g4", headers_for(outcome(4)), 0),
        ],
        compression_type="gzip",
        max_request_size=32 * 1024 * 1024,
    )
    scorer = await score(bus_config, 2)  # before: a 53 MB dead letter, five aborts, exit 2, forever
    assert [d.event.episode_id for d in await scores_of(bus_config)] == ["ep-004"]
    (letter,) = [d.event for d in await read_events(bus_config, DLQ, 1)]
    assert isinstance(letter, DeadLetter) and letter.trimmed[-1].part == "headers[64:200000]"
    assert scorer.processor.stats.dead_lettered == 1 and scorer.processor.stats.aborts == 0


async def test_null_header_values_are_carried_everywhere(bus_config: BusConfig, tmp_path: Path) -> None:
    good = outcome(1)
    await raw_send(
        bus_config,
        [
            (encode(good), b"g1", [*headers_for(good), ("trace", None)], None),
            (b"\xc1junk", b"g2", [("run_id", b"run-1"), ("trace", None)], None),
        ],
    )
    await score(bus_config, 2)
    assert [d.event.episode_id for d in await scores_of(bus_config)] == ["ep-001"]
    (letter,) = [d.event for d in await read_events(bus_config, DLQ, 1)]
    assert isinstance(letter, DeadLetter) and letter.null_headers == (1,)
    for name in ("out.jsonl", "out.msgpack"):  # replay (both formats) and read back
        result = await replay_to_file(bus_config, OUTCOMES, Bound("beginning"), Bound("end"), tmp_path / name)
        assert result.records == 2
        assert [dict(r.headers)["trace"] for r in read_file(tmp_path / name)] == [None, None]
    lines: list[str] = []
    with anyio.fail_after(30):
        await follow(
            bus_config, [OUTCOMES, DLQ], emit=lines.append, as_json=True, from_beginning=True, count=3
        )
    assert len(lines) == 3


async def test_an_empty_episode_id_is_dead_lettered_not_swallowed(bus_config: BusConfig) -> None:
    empty = outcome(1, episode_id="")
    await raw_send(
        bus_config,
        [
            (encode(empty), b"g1", headers_for(empty), None),
            (encode(outcome(2)), b"g2", headers_for(outcome(2)), None),
            (encode(outcome(3, episode_id="")), b"g3", [], None),
        ],
    )
    await score(bus_config, 3)
    assert [d.event.episode_id for d in await scores_of(bus_config)] == ["ep-002"]
    letters = [d.event for d in await read_events(bus_config, DLQ, 2)]
    assert [x.reason for x in letters] == ["invalid_identity", "invalid_identity"]  # type: ignore[union-attr]


class RaisesOnOdd:
    """A transform with a bug that only some records hit (odd episodes); even ones get a score."""

    def apply(self, delivery: Delivery) -> list[tuple[TopicSpec, Event]]:
        event = delivery.event
        assert isinstance(event, OutcomeEvent)
        if int(event.episode_id[3:]) % 2:
            raise ZeroDivisionError("a bug on odd episodes")
        ids = {k: getattr(event, k) for k in ("run_id", "group_id", "episode_id")}
        return [(SCORES, ScoreEvent(**ids, verdict=Reward(value=1.0), policy_version=0, scored_at=0.0))]

    async def restore(self, partitions: frozenset[int]) -> None:
        pass


async def test_a_record_that_makes_a_handler_raise_is_dead_lettered_and_the_stage_goes_on(
    bus_config: BusConfig,
) -> None:
    async with EventProducer(bus_config) as producer:
        for i in range(6):
            await producer.publish(OUTCOMES, outcome(i))
    processor = TransactionalProcessor(
        bus_config, source=OUTCOMES, group_id="t-proc", transactional_id="t-proc-0", transform=RaisesOnOdd()
    )
    with anyio.fail_after(60):
        await processor.run(stop_after=6)
    assert sorted(d.event.episode_id for d in await scores_of(bus_config)) == ["ep-000", "ep-002", "ep-004"]
    letters = [d.event for d in await read_events(bus_config, DLQ, 3)]
    assert {x.reason for x in letters} == {"transform_error"}  # type: ignore[union-attr]
    assert all("ZeroDivisionError" in x.error for x in letters)  # type: ignore[union-attr]

    # The at-least-once consumer follows the same table.
    seen: list[str] = []

    async def handler(d: Delivery) -> None:
        if d.event.episode_id == "ep-003":  # type: ignore[union-attr]
            raise KeyError("another bug")
        seen.append(d.event.episode_id)  # type: ignore[union-attr]

    async with EventProducer(bus_config) as dlq_producer:
        consumer = EventConsumer(bus_config, [OUTCOMES], group_id="t-consumer", dead_letters=dlq_producer)
        async with consumer:
            with anyio.fail_after(60):
                await consumer.run(handler, stop_after=6)
    assert len(seen) == 5 and consumer.dead_lettered == 1
    assert len([m async for m in read_raw(bus_config, bus_config.topics().name_of(DLQ))]) == 4
