"""Following topics without a consumer group: every partition assigned, each read from where the reader
says, the position kept by the reader itself (no group to join, nothing committed to the broker).

The trainer reads its inputs this way (from its checkpoint's offsets: its commit is its checkpoint),
the producers' policy watch reads the policy topic from its start, and ``tap`` follows topics live.
``Follower`` is the one place that assigns, seeks and polls for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from cua_stream.bus.consumer import (
    make_kafka_consumer,
    partitions_of,
    require_topics,
    start_consumer,
    stop_consumer,
)
from cua_stream.config import BusConfig
from cua_stream.topics import TopicSpec

Partition = tuple[str, int]
"""(topic name, partition number)."""


class Follower:
    """Every partition of ``specs``' topics, from ``offsets`` where given, else from ``start``.
    ``async with`` it; ``poll`` for what arrived. A topic that does not exist is TopicMissing at entry."""

    def __init__(
        self,
        config: BusConfig,
        specs: Sequence[TopicSpec],
        *,
        start: Literal["beginning", "end"] = "beginning",
        offsets: Mapping[Partition, int] | None = None,
        also_required: Sequence[TopicSpec] = (),
    ) -> None:
        self.config = config
        self.specs = tuple(specs)
        self.names = [config.topics().name_of(s) for s in self.specs]
        self.start = start
        self.offsets = dict(offsets or {})
        self.also_required = tuple(also_required)
        """Topics the reader writes to or relies on: checked at entry like the ones it reads."""
        self.partitions: list[Partition] = []
        self._consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> Follower:
        consumer = make_kafka_consumer(self.config, group_id=None, from_beginning=self.start == "beginning")
        await start_consumer(consumer, self.config)
        try:
            await require_topics(consumer, self.config.topics(), (*self.specs, *self.also_required))
            tps = [TopicPartition(n, p) for n in self.names for p in await partitions_of(consumer, n)]
            consumer.assign(tps)
            fresh = []
            for tp in tps:
                if (tp.topic, tp.partition) in self.offsets:
                    consumer.seek(tp, self.offsets[(tp.topic, tp.partition)])
                else:
                    fresh.append(tp)
            if fresh:
                await (consumer.seek_to_beginning if self.start == "beginning" else consumer.seek_to_end)(
                    *fresh
                )
        except BaseException:
            await stop_consumer(consumer)
            raise
        self.partitions = [(tp.topic, tp.partition) for tp in tps]
        self._consumer = consumer
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._consumer is not None:
            await stop_consumer(self._consumer)
            self._consumer = None

    @property
    def consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("Follower: not entered (use `async with`)")
        return self._consumer

    @property
    def live(self) -> AIOKafkaConsumer | None:
        """The consumer while entered, else None (for a sampler that outlives the reading)."""
        return self._consumer

    async def poll(self, timeout_s: float) -> list[ConsumerRecord]:
        """The records that arrived (waiting up to ``timeout_s`` for the first), each partition in order."""
        polled = await self.consumer.getmany(timeout_ms=int(timeout_s * 1000))
        return [msg for msgs in polled.values() for msg in msgs]

    async def positions(self) -> dict[Partition, int]:
        """The next offset to read, per partition (past every record ``poll`` returned)."""
        return {(t, p): await self.consumer.position(TopicPartition(t, p)) for t, p in self.partitions}

    async def end_offsets(self, partitions: Iterable[Partition] | None = None) -> dict[Partition, int]:
        """The current end of each partition (all of them by default), in one request."""
        wanted = [TopicPartition(t, p) for t, p in (self.partitions if partitions is None else partitions)]
        if not wanted:
            return {}
        return {
            (tp.topic, tp.partition): end for tp, end in (await self.consumer.end_offsets(wanted)).items()
        }

    async def caught_up(self, ends: Mapping[Partition, int]) -> bool:
        """Whether every partition has been read up to ``ends`` (``end_offsets`` taken earlier)."""
        positions = await self.positions()
        return all(positions[part] >= end for part, end in ends.items())
