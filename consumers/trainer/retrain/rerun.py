"""Re-training a run's recorded steps (``trainer.replay_batches_from``): the batches its steps took and the
settings it trained them with, read from its ``TrainStep`` and ``TrainerSettings`` records, so a trainer
takes the same groups in the same order (``groups.recorded_batch``) and its steps can be compared with the
recorded ones: on a replayed prefix under the run's own id, or on any prefix under a new one
(``trainer.retrain_of``: ``cua-stream retrain``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from consumers.trainer.retrain.settings_diff import changed_settings
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.errors import ConfigError
from cua_stream.events import TrainerSettings, TrainStep
from cua_stream.topics import TRAIN_STEPS

if TYPE_CHECKING:
    from consumers.trainer.config import TrainerConfig


@dataclass(frozen=True)
class RecordedRun:
    """What a run's log says of it: the first record of each step number (as ``inspect`` reads them),
    and its settings records, in log order."""

    run_id: str
    steps: dict[int, TrainStep]
    settings: list[TrainerSettings]
    where: str
    """The topic they were read from (for messages)."""


async def read_recorded(bus: BusConfig, prefix: str, run_id: str) -> RecordedRun:
    """Run ``run_id``'s step and settings records on the ``train_steps`` topic under ``prefix``."""
    source = msgspec.structs.replace(bus, topic_prefix=prefix)
    steps: dict[int, TrainStep] = {}
    settings: list[TrainerSettings] = []
    async for delivery in scan(source, TRAIN_STEPS):
        event = delivery.event
        if isinstance(event, TrainStep) and event.run_id == run_id:
            steps.setdefault(event.step, event)
        elif isinstance(event, TrainerSettings) and event.run_id == run_id:
            settings.append(event)
    return RecordedRun(run_id, steps, settings, source.topics().name_of(TRAIN_STEPS))


def parse_steps(text: str) -> tuple[int, int]:
    """``--steps``: ``A..B``, ``A..`` (to the last), ``..B``, ``A`` (one step), or empty (all) as
    (first, last), last 0 for the run's last; ValueError naming the option."""
    m = re.fullmatch(r"\s*(\d*)\s*(\.\.)?\s*(\d*)\s*", text)
    if not m or (not m[2] and m[3]) or (m[1] == "" and m[3] == "" and m[2]):
        raise ValueError(f"--steps: expected A..B (e.g. 2..5), A.., ..B or A, not {text!r}")
    first = int(m[1]) if m[1] else 1
    last = int(m[3]) if m[3] else (0 if m[2] or not m[1] else first)
    if first < 1 or (last and last < first):
        raise ValueError(f"--steps: {text!r} is no range of steps (they count from 1)")
    return first, last


def steps_in_range(recorded: RecordedRun, first: int, last: int) -> dict[int, tuple[str, ...]]:
    """Step number → the group ids it trained, in order, for steps ``first``..``last`` (0: the run's last);
    ConfigError naming the run's steps if it has none, or not every step of the range."""
    steps = recorded.steps
    if not steps:
        raise ConfigError(f"{recorded.where} holds no step of run {recorded.run_id!r}")
    last = last or max(steps)
    missing = [k for k in range(first, last + 1) if k not in steps]
    if missing or first > last:
        raise ConfigError(
            f"run {recorded.run_id!r} has no step {missing[0] if missing else first} on {recorded.where} "
            f"(its steps: {spans(sorted(steps))})"
        )
    return {k: steps[k].group_ids for k in range(first, last + 1)}


def spans(numbers: Sequence[int]) -> str:
    """``1..3, 5`` for [1, 2, 3, 5]."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def settings_in_force(records: Sequence[TrainerSettings], step: int) -> TrainerSettings | None:
    """The settings that trained ``step``: the last record (in log order) of a start before it; None if
    the run recorded none then (it ran before trainers published their settings)."""
    before = [r for r in records if r.step < step]
    return before[-1] if before else None


def settings_changes(
    records: Sequence[TrainerSettings], first: int, last: int
) -> list[tuple[int, list[str]]]:
    """Where the run resumed with other settings within steps ``first``..``last``: each such restart's
    first step and the fields that changed then (those a retrain sets itself aside)."""
    out: list[tuple[int, list[str]]] = []
    current = settings_in_force(records, first)
    for record in records:
        if current is not None and first <= record.step < last:
            if fields := sorted(changed_settings(current.settings, record.settings)):
                out.append((record.step + 1, fields))
            current = record
    return out


def start_error(recorded: Mapping[int, object] | None, step: int, directory: object) -> str | None:
    """Why a re-training cannot start from a checkpoint at ``step``, if it cannot: the step after it must
    be one it trains (a checkpoint before its first would wait for groups no recorded step lists)."""
    if recorded is None or not recorded or step + 1 >= min(recorded):
        return None
    return (
        f"trainer.replay_from_step: step {min(recorded)}, but {directory} is at step {step}: start from the "
        "weights of the step before it (cua-stream retrain --start prepares them)"
    )


async def recorded_batches(
    config: TrainerConfig,
) -> tuple[dict[int, tuple[str, ...]], Mapping[str, object] | None]:
    """The batches of the recorded steps ``config`` trains again, and the settings they were trained with
    (None where the run recorded none)."""
    recorded = await read_recorded(config.bus, config.replay_batches_from, config.episodes_run)
    batches = steps_in_range(recorded, config.replay_from_step, config.replay_to_step)
    source = settings_in_force(recorded.settings, config.replay_from_step)
    return batches, source.settings if source is not None else None
