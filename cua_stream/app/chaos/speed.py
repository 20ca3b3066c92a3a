"""The loop's speed, summarised from its records: what ``bench/loop_sync_async.py`` prints for each
configuration (sync against async, per weight-update mode). Pure: the run's ``TrainStep`` records and
the engine's busy counters sampled over time in, numbers out.

What the records give: each step's ``wait_s`` (the trainer had no batch to train), ``train_s`` (its
forward/backward, padded to ``trainer.min_step_s``), ``stale_tokens_<lag>`` (its trained tokens per
staleness) and ``previous_push_at`` / ``previous_push_s`` (the weight push of the step before: a step's
record is checkpointed before its own push, so the next one carries it).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cua_stream.events import TrainStep

STALE_PREFIX = "stale_tokens_"


@dataclass(frozen=True)
class EngineSample:
    """The engine's counters at one moment (``GET /debug/scheduler``)."""

    at: float
    busy_s: float
    """Seconds in decode rounds that advanced a request, since the engine started."""
    slot_s: float
    """Those rounds' seconds times the requests each advanced."""


@dataclass(frozen=True)
class LoopSpeed:
    steps: int
    wall_s: float
    """From the run's start (its first work request) to the last step's end."""
    engine_busy: float
    """Share of the wall the engine spent in decode rounds."""
    trainer_idle: float
    """Share of the wall the trainer had no batch to train (the steps' ``wait_s``)."""
    trainer_train: float
    """Share of the wall in optimizer steps (``train_s``)."""
    staleness: dict[int, int]
    """Trained tokens per staleness (versions behind the weights they trained)."""
    update_s: list[float]
    """Each weight push's wall (the trainer's: drain or pause, load, resume or continue)."""
    update_idle_s: list[float]
    """Each push's engine work lost: its wall less the decode slots used within it, counted at the
    run's slot rate outside the pushes (a drain's tail of one call counts as mostly lost)."""


def counter_at(samples: Sequence[EngineSample], t: float) -> tuple[float, float]:
    """(busy_s, slot_s) at ``t``, linear between the samples around it (clamped at the ends)."""
    if not samples:
        return 0.0, 0.0
    times = [s.at for s in samples]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return samples[0].busy_s, samples[0].slot_s
    if i == len(samples):
        return samples[-1].busy_s, samples[-1].slot_s
    a, b = samples[i - 1], samples[i]
    f = (t - a.at) / (b.at - a.at) if b.at > a.at else 1.0
    return a.busy_s + f * (b.busy_s - a.busy_s), a.slot_s + f * (b.slot_s - a.slot_s)


def stale_tokens(steps: Sequence[TrainStep]) -> dict[int, int]:
    counts: Counter[int] = Counter()
    for step in steps:
        for key, n in step.metrics.items():
            if key.startswith(STALE_PREFIX):
                counts[int(key.removeprefix(STALE_PREFIX))] += int(n)
    return dict(sorted(counts.items()))


def summarise(steps: Sequence[TrainStep], started_at: float, engine: Sequence[EngineSample]) -> LoopSpeed:
    """One configuration's numbers from its steps (any order) and the engine's samples (by time)."""
    if not steps:
        raise ValueError("no steps to summarise")
    ordered = sorted(steps, key=lambda s: s.step)
    ended_at = max(s.finished_at for s in ordered)
    wall = ended_at - started_at
    busy0, slot0 = counter_at(engine, started_at)
    busy1, slot1 = counter_at(engine, ended_at)
    windows = [
        (s.metrics["previous_push_at"], s.metrics["previous_push_s"])
        for s in ordered
        if "previous_push_at" in s.metrics and "previous_push_s" in s.metrics
    ]
    used = [counter_at(engine, at + d)[1] - counter_at(engine, at)[1] for at, d in windows]
    outside_s = wall - sum(d for _, d in windows)
    rate = (slot1 - slot0 - sum(used)) / outside_s if outside_s > 0 else 0.0
    idle = [max(0.0, d - (u / rate if rate > 0 else 0.0)) for (_, d), u in zip(windows, used, strict=True)]
    return LoopSpeed(
        steps=len(ordered),
        wall_s=wall,
        engine_busy=(busy1 - busy0) / wall if wall > 0 else 0.0,
        trainer_idle=sum(s.metrics.get("wait_s", 0.0) for s in ordered) / wall if wall > 0 else 0.0,
        trainer_train=sum(s.metrics.get("train_s", 0.0) for s in ordered) / wall if wall > 0 else 0.0,
        staleness=stale_tokens(ordered),
        update_s=[d for _, d in windows],
        update_idle_s=idle,
    )


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


@dataclass(frozen=True)
class Goal:
    name: str
    value: float
    """The measured ratio (NaN: its configurations were not run)."""
    target: float
    at_least: bool
    """True: met when ``value >= target``; False: when ``value <= target``."""

    @property
    def met(self) -> bool | None:
        if self.value != self.value:  # NaN
            return None
        return self.value >= self.target if self.at_least else self.value <= self.target


SYNC = "sync"


def goals(rows: Mapping[str, LoopSpeed]) -> list[Goal]:
    """The benchmark's goals: the best async configuration at least 1.7x sync's speed to the same steps,
    and ``in_place`` / ``retract`` losing at most 5 % of the engine work ``drain`` loses per update (at
    the same staleness bound)."""
    nan = float("nan")
    asyncs = [r for name, r in rows.items() if name != SYNC]
    speedup = rows[SYNC].wall_s / min(r.wall_s for r in asyncs) if SYNC in rows and asyncs else nan
    found = [Goal("best async >= 1.7x sync (wall to N steps)", speedup, 1.7, True)]
    for mode in ("in_place", "retract"):
        ratios = [
            mean(r.update_idle_s) / mean(rows[drain].update_idle_s)
            for name, r in rows.items()
            if name.endswith(f"-{mode}")
            and (drain := name.removesuffix(f"-{mode}") + "-drain") in rows
            and mean(rows[drain].update_idle_s) > 0
        ]
        found.append(Goal(f"{mode} idle per update <= 5% of drain's", max(ratios, default=nan), 0.05, False))
    return found
