"""Shared by the producer's tests (scripted and on the desktop): work requests in, records out."""

from __future__ import annotations

import time

from consumers.trainer.stream.feeder import work_for_group
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import PolicyVersion, WorkRequest
from cua_stream.topics import POLICY, TopicSpec, work_topic


def work_requests(
    run_id: str, groups: int, size: int, *, version: int = 0, max_new_tokens: int = 4
) -> list[WorkRequest]:
    """``groups`` groups of ``size`` episodes of the click-button task, as the trainer's feeder issues them."""
    sampling = {"temperature": 1.0, "max_new_tokens": max_new_tokens}
    return [
        w
        for g in range(groups)
        for w in work_for_group(
            run_id, g, tasks=["click-button"], group_size=size, policy_version=version, sampling=sampling,
            now=time.time(),
        )
    ]  # fmt: skip


async def publish(bus: BusConfig, *items: WorkRequest | PolicyVersion) -> None:
    """Each item where its issuer puts it: a version on the policy topic, work on its run's work topic."""
    async with EventProducer(bus) as out:
        for item in items:
            await out.publish(POLICY if isinstance(item, PolicyVersion) else work_topic(item.run_id), item)


async def events_of[T](bus: BusConfig, spec: TopicSpec, cls: type[T]) -> list[T]:
    return [d.event async for d in scan(bus, spec) if isinstance(d.event, cls)]
