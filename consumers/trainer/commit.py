"""The trainer's commit protocol and the restart's reconciliation with the log.

A step's records reach the log only through its checkpoint: the checkpoint lists them (``pending``)
before any is published, so a kill -9 at any moment loses none and publishes none twice:

a. the step's weights are saved (the daemon: the engine's next version);
b. the checkpoint is written (``checkpoint_of``): step, version, weights, decided groups, where each
   input partition resumes and how far it was read, the feeder's position, and ``pending``;
c. the engine loads the weights (the daemon: the gateway is drained meanwhile);
d. the pending records are published (``publish``).

A restart publishes those of the checkpoint's pending records the log does not hold yet
(``reconcile``: a record is the same record by ``identity_of``, not by its bytes), and reissues the
requests of a group it was killed while issuing (``issued_in_log``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.stream.feeder import missing_work
from consumers.trainer.stream.join import Join
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import (
    DeadLetter,
    Event,
    GroupDropped,
    PolicyVersion,
    TrainStep,
    WorkRequest,
    from_json,
    to_json,
)
from cua_stream.identity import index_of
from cua_stream.topics import DLQ, POLICY, TRAIN_STEPS, WORK, TopicSpec

log = logging.getLogger(__name__)


def checkpoint_of(
    run_id: str,
    *,
    step: int,
    version: int,
    weights: str,
    issued: int,
    join: Join,
    positions: Mapping[tuple[str, int], int],
    outputs: Sequence[Event],
) -> ckpt.Checkpoint:
    """The checkpoint that commits a step (b.): ``positions`` are where each input partition was read
    to, ``outputs`` the records the step publishes."""
    return ckpt.Checkpoint(
        run_id=run_id,
        step=step,
        version=version,
        weights=weights,
        decided=sorted(join.decided),
        offsets=[(t, p, o) for (t, p), o in sorted(join.resume_offsets(dict(positions)).items())],
        read_to=[(t, p, o) for (t, p), o in sorted(positions.items())],
        issued=issued,
        pending=[to_json(e).decode() for e in outputs],
    )


async def publish(producer: EventProducer, outputs: Sequence[Event]) -> None:
    """Publish a committed step's records (d.), each durable before the next."""
    for event in outputs:
        await producer.publish(topic_of(event), event)


async def reconcile(bus: BusConfig, producer: EventProducer, pending: Sequence[str]) -> None:
    """Publish the checkpoint's pending records that the log does not hold yet."""
    if not pending:
        return
    events = [from_json(raw) for raw in pending]
    present: set[tuple[str, object]] = set()
    for spec in {topic_of(e) for e in events}:
        async for d in scan(bus, spec):
            present.add(identity_of(d.event))
    for event in events:
        if identity_of(event) not in present:
            await producer.publish(topic_of(event), event)


async def issued_in_log(config: TrainerConfig, producer: EventProducer, decided: set[str]) -> int:
    """One past the highest group index of this run on the work topic; the requests of a group it was
    killed while issuing are issued now (a group short of episodes would never complete)."""
    highest = -1
    issued: list[WorkRequest] = []
    async for d in scan(config.bus, WORK):
        if d.event.run_id == config.run_id and (k := index_of(config.run_id, d.event.group_id)) is not None:
            highest = max(highest, k)
            if d.event.group_id not in decided:
                issued.append(d.event)
    for work in missing_work(issued, config.group_size):
        log.warning("issuing %s: the last run stopped while issuing its group", work.episode_id)
        await producer.publish(WORK, work)
    return highest + 1


def identity_of(event: object) -> tuple[str, object]:
    """What makes a published trainer record the same record (for the restart's reconciliation)."""
    if isinstance(event, TrainStep):
        return ("step", (event.run_id, event.step))
    if isinstance(event, PolicyVersion):
        return ("version", (event.run_id, event.version))
    if isinstance(event, GroupDropped):
        return ("drop", (event.run_id, event.group_id))
    if isinstance(event, DeadLetter):
        return ("dead_letter", (event.source_topic, event.partition, event.offset))
    return ("other", id(event))


def topic_of(event: Event) -> TopicSpec:
    """Where the trainer publishes ``event``."""
    if isinstance(event, PolicyVersion):
        return POLICY
    return DLQ if isinstance(event, DeadLetter) else TRAIN_STEPS
