"""Runs side by side (``cua-stream runs compare``): each run's per-step loss, KL, clip fraction, grad norm
and logprob gap from its ``TrainStep`` records, and what its settings changed against the first run's
(from their ``TrainerSettings`` records). Pure: ``consumers/trainer/retrain/rerun.py`` reads the records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from consumers.trainer.retrain.rerun import RecordedRun, settings_in_force, spans
from consumers.trainer.retrain.settings_diff import changed_settings
from cua_stream.errors import ConfigError
from cua_stream.events import TrainStep

COMPARED = ("loss", "kl", "clip_fraction", "grad_norm", "logprob_gap")
"""The per-step figures compared (``TrainStep.loss`` and its metrics of those names)."""


def figure(step: TrainStep, name: str) -> float | None:
    """One of ``COMPARED`` from a step's record (None if it lacks it)."""
    return step.loss if name == "loss" else step.metrics.get(name)


@dataclass(frozen=True)
class Series:
    run_id: str
    retrain_of: str
    """The run it retrained (its steps' mark); empty: trained live."""
    changed: dict[str, Any] | None
    """Its settings that differ from the first run's (None: one of the two recorded none)."""
    steps: dict[int, TrainStep]


def compare(runs: Sequence[RecordedRun], first: int = 1, last: int = 0) -> list[Series]:
    """Each run's steps ``first``..``last`` (0: all), and its settings against the first run's, each
    side's in force at the range's first step it holds; ConfigError naming a run with no step there."""
    out: list[Series] = []
    base: dict[str, Any] | None = None
    for i, run in enumerate(runs):
        steps = {k: s for k, s in run.steps.items() if k >= first and (not last or k <= last)}
        if not steps:
            held = f" (its steps: {spans(sorted(run.steps))})" if run.steps else ""
            raise ConfigError(f"run {run.run_id!r} has no step to compare on {run.where}{held}")
        record = settings_in_force(run.settings, min(steps))
        settings = record.settings if record is not None else None
        base = settings if i == 0 else base
        changed = None if base is None or settings is None else changed_settings(base, settings)
        retrain_of = next((s.retrain_of for s in steps.values() if s.retrain_of), "")
        out.append(Series(run.run_id, retrain_of, {} if i == 0 else changed, steps))
    return out


def header_lines(series: Sequence[Series]) -> list[str]:
    """One line per run: what it is, and what its settings changed against the first run's."""
    lines = []
    for i, s in enumerate(series):
        what = f"a retrain of {s.retrain_of}" if s.retrain_of else "trained live"
        steps = f"steps {spans(sorted(s.steps))}"
        if i == 0:
            lines.append(f"{s.run_id}: {what}, {steps} (the baseline)")
        elif s.changed is None:
            lines.append(f"{s.run_id}: {what}, {steps}; settings not recorded on the log")
        else:
            change = ", ".join(f"{k} {json.dumps(v)}" for k, v in s.changed.items()) or "no setting"
            lines.append(f"{s.run_id}: {what}, {steps}; changed: {change}")
    return lines


def table(series: Sequence[Series]) -> list[list[str]]:
    """The table: a header row, then a row per step and run (``-`` where a run lacks the step)."""
    rows = [["step", "run", *COMPARED]]
    for step in sorted({k for s in series for k in s.steps}):
        for s in series:
            record = s.steps.get(step)
            values = [figure(record, n) if record is not None else None for n in COMPARED]
            rows.append([str(step), s.run_id, *("-" if v is None else f"{v:.6g}" for v in values)])
    return rows


def render(rows: Sequence[Sequence[str]]) -> str:
    """The table as aligned text (numbers right-aligned)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )


def document(series: Sequence[Series]) -> dict[str, Any]:
    """The comparison as one JSON document."""
    return {
        "runs": [
            {
                "run_id": s.run_id,
                "retrain_of": s.retrain_of,
                "changed": s.changed,
                "steps": [
                    {"step": k, **{n: figure(r, n) for n in COMPARED}} for k, r in sorted(s.steps.items())
                ],
            }
            for s in series
        ]
    }
