"""Rollouts in this process: a producer and a scorer running beside the command that needs episodes
(``demo``, ``learn``, ``record-oracle``, ``eval``), and ``run_episodes``, which issues work and waits
for its scores. Below the CLI, so the evaluation library runs episodes the way the commands do."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from cua_stream.config import BusConfig

if TYPE_CHECKING:
    from cua_stream.bus.follow import Follower
    from cua_stream.events import ScoreEvent, WorkRequest
    from producers.config import ProducerConfig

SCORED_STALL_S = 1800.0
"""How long ``run_episodes`` waits for the next score. Episodes are scored as they finish, so a wait
longer than any one episode takes (computer-1's timeout, the desktop's start, the verifier) means the
rest never will be. Before, 30 minutes bounded the whole wait, and cut long evaluations short: on a
loaded 2-core machine, 200 MiniWoB++ episodes took an hour, and 79 were left unscored while they ran."""
PRODUCER_STOP_S = 15.0
"""How long a stopping in-process producer gets to finish: its episodes in hand (none, once every one is
scored) and its last commits."""


@dataclass
class Rollouts:
    """An in-process scorer and producer, running (``rollouts``); more tasks go in ``task_group``."""

    task_group: TaskGroup
    producer_stop: anyio.Event

    def stop_producer(self) -> None:
        """Let the producer finish the episodes in hand and stop taking work (the scorer goes on)."""
        self.producer_stop.set()


@asynccontextmanager
async def rollouts(producer: ProducerConfig) -> AsyncIterator[Rollouts]:
    """Run a scorer and a producer in this process for the block (the one wiring ``demo``, ``learn``,
    ``record-oracle`` and ``run_episodes`` share); both are stopped when it ends."""
    from consumers.scorer.config import ScorerConfig
    from consumers.scorer.daemon import Scorer
    from producers.daemon import Producer

    stop, stopped = anyio.Event(), anyio.Event()

    async def produce(task_status: TaskStatus[None]) -> None:
        try:
            await Producer(producer).run(stop=stop, task_status=task_status)
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        await tg.start(Scorer(ScorerConfig(bus=producer.bus)).run)
        await tg.start(produce)
        try:
            yield Rollouts(tg, stop)
        finally:
            stop.set()
            # the producer's last commits, before it is cancelled: an answered request left uncommitted
            # would be played again by the next producer of the group (the next run of this command)
            with anyio.CancelScope(shield=True), anyio.move_on_after(PRODUCER_STOP_S):
                await stopped.wait()
            tg.cancel_scope.cancel()


async def run_episodes(
    producer: ProducerConfig, work: list[WorkRequest], *, resume: bool = False
) -> dict[str, ScoreEvent]:
    """Run ``work`` with an in-process producer and scorer until every episode is scored (bounded).
    ``resume``: a request already on the work topic (an earlier, killed start of the same run issued it)
    is not issued again: the producers' group runs it once, or has already answered it. The producer
    may run the task directories ``work`` names (this command's own arguments named them), and no others
    (``producer.task_roots``)."""
    from cua_stream.bus.producer import EventProducer
    from cua_stream.bus.reader import scan
    from cua_stream.topics import work_topic

    producer = producer.allowing(w.task for w in work)
    async with rollouts(producer):
        wanted, issued = {w.episode_id for w in work}, set()
        if resume:
            for topic in {work_topic(w.run_id) for w in work}:
                issued |= {
                    d.event.episode_id
                    async for d in scan(producer.bus, topic)
                    if d.event.episode_id in wanted
                }
        async with EventProducer(producer.bus) as publisher:
            for request in work:
                if request.episode_id not in issued:
                    await publisher.publish(work_topic(request.run_id), request)
        return await _scores_of(producer.bus, work)


async def _scores_of(bus: BusConfig, work: list[WorkRequest]) -> dict[str, ScoreEvent]:
    """Wait (bounded) until every episode of ``work`` is scored; the scores by episode. The scores topic
    is followed from its start, each record read once (the ``Follower`` keeps the positions; before, the
    whole topic was read again every 2 s)."""
    from cua_stream.bus.follow import Follower
    from cua_stream.topics import SCORES

    wanted = {w.episode_id for w in work}
    found: dict[str, ScoreEvent] = {}
    progressed = time.monotonic()
    async with Follower(bus, [SCORES]) as scores:
        while waiting(len(found), len(wanted), time.monotonic() - progressed):
            before = len(found)
            await _take_scores(scores, wanted, found, timeout_s=2.0)
            if len(found) > before:
                progressed = time.monotonic()
    return found


async def _take_scores(
    scores: Follower, wanted: set[str], found: dict[str, ScoreEvent], *, timeout_s: float
) -> int:
    """Put the scores of ``wanted`` episodes that arrived (waiting up to ``timeout_s`` for the first) in
    ``found``; how many records were read. An undecodable record is skipped, as ``bus.reader.scan``
    skips it (it was dead-lettered when first consumed)."""
    from cua_stream.bus.consumer import decode_message
    from cua_stream.errors import RecordError
    from cua_stream.topics import SCORES

    topics = {scores.names[0]: SCORES}
    records = await scores.poll(timeout_s)
    for msg in records:
        try:
            event = decode_message(topics, msg).event
        except RecordError:
            continue
        if event.episode_id in wanted:
            found[event.episode_id] = event  # type: ignore[assignment]
    return len(records)


def waiting(scored: int, wanted: int, since_progress_s: float, stall_s: float = SCORED_STALL_S) -> bool:
    """Whether to wait on for scores: some are missing and the last new one came less than ``stall_s``
    ago (however long the whole wait has been). Pure."""
    return scored < wanted and since_progress_s < stall_s
