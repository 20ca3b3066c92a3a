"""The latest policy version per run, followed from the compacted policy topic (for admission control)."""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskStatus

from cua_stream.bus.consumer import decode_message
from cua_stream.bus.follow import Follower
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
        async with Follower(self.bus, [POLICY]) as policy:
            ends = await policy.end_offsets()
            started = False
            while True:
                for msg in await policy.poll(0.5):
                    self._take(name, msg)
                if not started and await policy.caught_up(ends):
                    task_status.started()
                    started = True

    def _take(self, name: str, msg: object) -> None:
        try:
            event = decode_message({name: POLICY}, msg).event  # type: ignore[arg-type]
        except RecordError as e:
            # Not dead-lettered from here: every producer reads the whole topic (no group), so each would
            # write its own copy. The trainer of the run it is keyed by dead-letters it, once.
            log.warning("policy topic: skipping an undecodable record %s[%d]@%d (%s)",
                        getattr(msg, "topic", "?"), getattr(msg, "partition", -1), getattr(msg, "offset", -1), e)  # fmt: skip
            return
        if isinstance(event, PolicyVersion):
            self.latest[event.run_id] = max(self.version_of(event.run_id), event.version)
