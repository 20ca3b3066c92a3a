"""Reading what ``step`` rebuilds from: a run's step records and drops, its episodes' calls and scores
(group-less reads of committed records). Shared by ``cua-stream inspect`` and the dashboard's inspect
route; the rebuild itself is ``consumers.trainer.inspect.step`` (pure)."""

from __future__ import annotations

from collections.abc import Callable

from consumers.trainer.inspect.step import StepBatch, StepRules, rebuild_step
from cua_stream.bus.codec import Delivery
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import CallRecord, GroupDropped, ScoreEvent, TrainStep
from cua_stream.topics import SCORES, SUMMARIES, TRAIN_STEPS, TURNS


async def steps_of(bus: BusConfig, run: str) -> tuple[list[TrainStep], list[GroupDropped]]:
    """The run's step records (first of each number, as published) and its groups' drops."""
    steps: dict[int, TrainStep] = {}
    drops: list[GroupDropped] = []
    async for delivery in scan(bus, TRAIN_STEPS):
        event = delivery.event
        if isinstance(event, TrainStep) and event.run_id == run:
            steps.setdefault(event.step, event)
        elif isinstance(event, GroupDropped) and event.run_id == run:
            drops.append(event)
    return sorted(steps.values(), key=lambda s: s.step), drops


async def episode_records(bus: BusConfig, keep: Callable[[CallRecord | ScoreEvent], bool]) -> list[Delivery]:
    """The calls and scores ``keep`` accepts, each topic partition by partition in offset order (so the
    first score of an episode is the one the trainer kept)."""
    out: list[Delivery] = []
    for spec in (TURNS, SUMMARIES, SCORES):
        async for delivery in scan(bus, spec):
            if isinstance(delivery.event, (CallRecord, ScoreEvent)) and keep(delivery.event):
                out.append(delivery)
    return out


async def read_step(bus: BusConfig, run: str, number: int, rules: StepRules) -> StepBatch:
    """Step ``number`` of ``run`` rebuilt from the topics; LookupError (naming the steps there are) if the
    run has no such step."""
    steps, _ = await steps_of(bus, run)
    record = next((s for s in steps if s.step == number), None)
    if record is None:
        known = ", ".join(str(s.step) for s in steps[-20:]) or "none"
        raise LookupError(
            f"run {run!r} has no step {number} on {bus.topics().name_of(TRAIN_STEPS)} (its steps: {known})"
        )
    wanted = set(record.group_ids)
    records = await episode_records(bus, lambda e: e.run_id == run and e.group_id in wanted)
    return rebuild_step(record, records, rules)
