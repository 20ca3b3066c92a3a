"""The latest policy version per run, followed from the compacted policy topic (for admission control)."""

from __future__ import annotations

import logging

from cua_stream.bus.consumer import decode_message, make_kafka_consumer, start_consumer, stop_consumer
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

    async def run(self) -> None:
        """Follow the topic from its start until cancelled (no group: every producer reads it all)."""
        name = self.bus.topics().name_of(POLICY)
        consumer = make_kafka_consumer(self.bus, group_id=None)
        await start_consumer(consumer, self.bus)
        try:
            consumer.subscribe([name])
            while True:
                for msgs in (await consumer.getmany(timeout_ms=1000)).values():
                    for msg in msgs:
                        try:
                            event = decode_message({name: POLICY}, msg).event
                        except RecordError as e:  # the trainer's own topic: its dead letters are its job
                            log.warning("policy topic: skipping an undecodable record (%s)", e)
                            continue
                        if isinstance(event, PolicyVersion):
                            self.latest[event.run_id] = max(self.version_of(event.run_id), event.version)
        finally:
            await stop_consumer(consumer)
