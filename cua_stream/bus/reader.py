"""Group-less reads of a topic range: replay, state restore and tests.

Ranges are per partition: ``[start, end)`` where either bound is an offset or a timestamp (ms since the
epoch, resolved with the broker's time index). Reads stop at the end offsets captured when the read
begins, so a range read terminates even while producers keep writing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from cua_stream.bus.codec import Delivery
from cua_stream.bus.consumer import (
    decode_message,
    make_kafka_consumer,
    partitions_of,
    start_consumer,
    stop_consumer,
)
from cua_stream.config import BusConfig
from cua_stream.errors import RecordError
from cua_stream.topics import TopicSpec


@dataclass(frozen=True)
class Bound:
    """One end of a range: an offset, a timestamp in ms, or the partition's beginning/end."""

    kind: Literal["offset", "time", "beginning", "end"]
    value: int = 0

    @classmethod
    def parse(cls, text: str | None, *, default: Literal["beginning", "end"]) -> Bound:
        """``None``/``''`` → default; ``123`` → offset; ``@1700000000000`` → ms; ISO-8601 → time."""
        if not text:
            return cls(default)
        if text in ("beginning", "end"):
            return cls(text)  # type: ignore[arg-type]
        if text.isdigit():
            return cls("offset", int(text))
        if text.startswith("@") and text[1:].isdigit():
            return cls("time", int(text[1:]))
        from datetime import datetime

        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"bad range bound {text!r}: use an offset (123), @epoch-ms, or ISO-8601 time"
            ) from None
        if dt.tzinfo is None:
            raise ValueError(f"bad range bound {text!r}: an ISO time needs a timezone (e.g. +00:00)")
        return cls("time", int(dt.timestamp() * 1000))


async def _resolve(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], bound: Bound
) -> dict[TopicPartition, int]:
    first = await consumer.beginning_offsets(tps)
    last = await consumer.end_offsets(tps)
    if bound.kind == "beginning":
        return dict(first)
    if bound.kind == "end":
        return dict(last)
    if bound.kind == "offset":
        return {tp: min(max(bound.value, first[tp]), last[tp]) for tp in tps}
    found = await consumer.offsets_for_times(dict.fromkeys(tps, bound.value))
    return {tp: (found[tp].offset if found.get(tp) is not None else last[tp]) for tp in tps}


async def read_raw(
    config: BusConfig,
    topic: str,
    *,
    start: Bound = Bound("beginning"),
    end: Bound = Bound("end"),
    partitions: Iterable[int] | None = None,
    read_committed: bool = True,
) -> AsyncIterator[ConsumerRecord]:
    """Raw records of ``topic`` in ``[start, end)`` per partition, partition by partition order of arrival."""
    async for msg in read_topics(
        config, [topic], start=start, end=end, partitions=partitions, read_committed=read_committed
    ):
        yield msg


async def read_topics(
    config: BusConfig,
    topics: Sequence[str],
    *,
    start: Bound = Bound("beginning"),
    end: Bound | None = Bound("end"),
    partitions: Iterable[int] | None = None,
    read_committed: bool = True,
) -> AsyncIterator[ConsumerRecord]:
    """Raw records of ``topics`` in ``[start, end)`` per partition, in order of arrival (each partition in
    order); ``end=None`` follows them live, without end (a dashboard)."""
    consumer = make_kafka_consumer(config, group_id=None, read_committed=read_committed)
    await start_consumer(consumer, config)
    try:
        tps: list[TopicPartition] = []
        for topic in topics:
            parts = sorted(partitions) if partitions is not None else await partitions_of(consumer, topic)
            if not parts:
                raise LookupError(f"topic {topic!r} does not exist (or has no partitions)")
            tps += [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        begin = await _resolve(consumer, tps, start)
        stop = await _resolve(consumer, tps, end) if end is not None else None
        pending = {tp for tp in tps if stop is None or begin[tp] < stop[tp]}
        for tp in tps:
            consumer.seek(tp, begin[tp])
        while pending:
            polled = await consumer.getmany(*pending, timeout_ms=1000)
            for tp, msgs in polled.items():
                for msg in msgs:
                    if stop is None or msg.offset < stop[tp]:
                        yield msg
            for tp in list(pending) if stop is not None else ():
                # Under read_committed the position skips transaction markers and aborted records.
                if await consumer.position(tp) >= stop[tp]:
                    pending.discard(tp)
    finally:
        await stop_consumer(consumer)


async def read_record(config: BusConfig, topic: str, partition: int, offset: int) -> ConsumerRecord | None:
    """The committed record at ``offset`` of ``topic``'s ``partition``, or None if it is gone (retention)
    or was never committed."""
    start, end = Bound("offset", offset), Bound("offset", offset + 1)
    async for msg in read_raw(config, topic, start=start, end=end, partitions=[partition]):
        if msg.offset == offset:
            return msg
    return None


async def scan(
    config: BusConfig, spec: TopicSpec, partitions: Iterable[int] | None = None
) -> AsyncIterator[Delivery]:
    """Every decodable committed record of ``spec`` from the beginning to the current end. A record that
    cannot be decoded is skipped (it was dead-lettered when first consumed); any other error is raised:
    a restore that skipped records silently would rebuild the wrong state."""
    topics = config.topics()
    name = topics.name_of(spec)
    async for msg in read_raw(config, name, partitions=partitions):
        try:
            yield decode_message({name: spec}, msg)
        except RecordError:
            continue


async def read_events(
    config: BusConfig, spec: TopicSpec, count: int, timeout_s: float = 30.0
) -> list[Delivery]:
    """Wait until ``spec``'s topic holds at least ``count`` committed records; return the first ``count``
    (in partition, offset order). Raises TimeoutError naming how many arrived."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = [d async for d in scan(config, spec)]
        if len(got) >= count:
            got.sort(key=lambda d: (d.partition, d.offset))
            return got[:count]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{spec.name}: {len(got)} of {count} records after {timeout_s:.0f}s")
        await anyio.sleep(0.2)
