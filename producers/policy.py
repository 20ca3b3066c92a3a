"""The latest policy version per run, followed from the compacted policy topic (for admission control)."""

from __future__ import annotations

import logging

import anyio
from aiokafka import TopicPartition
from anyio.abc import TaskStatus

from cua_stream.bus.consumer import (
    decode_message,
    make_kafka_consumer,
    partitions_of,
    start_consumer,
    stop_consumer,
)
from cua_stream.config import BusConfig
from cua_stream.errors import RecordError
from cua_stream.events import PolicyVersion
from cua_stream.topics import POLICY

log = logging.getLogger(__name__)


class PolicyWatch:
    def __init__(self, bus: BusConfig) -> None:
        self.bus = bus
        self.latest: dict[str, int] = {}

    def version_of(self, run_id: str) -> int:
        return self.latest.get(run_id, 0)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the topic from its start until cancelled (no group: every producer reads all of it);
        started once it has read up to the end it found, so admission never judges on an empty view."""
        name = self.bus.topics().name_of(POLICY)
        consumer = make_kafka_consumer(self.bus, group_id=None)
        await start_consumer(consumer, self.bus)
        try:
            tps = [TopicPartition(name, p) for p in await partitions_of(consumer, name)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps) if tps else {}
            started = False
            while True:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    for msg in msgs:
                        self._take(name, msg)
                if not started and await self._caught_up(consumer, ends):
                    task_status.started()
                    started = True
        finally:
            await stop_consumer(consumer)

    @staticmethod
    async def _caught_up(consumer: object, ends: dict[TopicPartition, int]) -> bool:
        for tp, end in ends.items():
            if await consumer.position(tp) < end:  # type: ignore[attr-defined]
                return False
        return True

    def _take(self, name: str, msg: object) -> None:
        try:
            event = decode_message({name: POLICY}, msg).event  # type: ignore[arg-type]
        except RecordError as e:  # the trainer's own topic: its dead letters are its job
            log.warning("policy topic: skipping an undecodable record (%s)", e)
            return
        if isinstance(event, PolicyVersion):
            self.latest[event.run_id] = max(self.version_of(event.run_id), event.version)
