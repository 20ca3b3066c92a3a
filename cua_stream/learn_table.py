"""``cua-stream learn``'s closing table: per task, the success of the blind baseline (the best fixed
click, ``cua_stream.tasks.blind``), of the base policy, after SFT and after GRPO, each with the episodes
behind it. Pure: evaluation reports in, rows out; the CLI prints the rows, the dashboard shows them.

Every column is an ``EvalReport`` on the evals topic, under the run id ``eval-<learn run>-<stage>`` and
the policy name ``<stage>``: the policies' are ``cua-stream eval``'s, the blind baseline's is computed
from the task's layouts (no episode is played: a fixed click's verdict is known from the layout). So the
dashboard, which reads that topic, rebuilds the same table from the same records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cua_stream.evaluation.stats import OVERALL, wilson
from cua_stream.events import EvalReport, EvalTask
from cua_stream.identity import EVAL_RUN_PREFIX
from cua_stream.tasks.blind import best_fixed_click

STAGES = ("blind", "base", "sft", "grpo")
"""The table's columns, in order: the reports' policy names."""
HEADINGS = {"blind": "blind baseline", "base": "base", "sft": "after SFT", "grpo": "after GRPO"}
BLIND_LAYOUTS = 1000
"""Layouts per task the blind baseline's click is chosen and measured on (the evaluation range's first:
the policies' held-out layouts among them). Over 1,000, click-button's best click hits 7.8 % (over
3,000, 7.5 %: the choice on the measured layouts flatters it by little)."""
BLIND_ENVIRONMENT = "computed from the layouts"


@dataclass(frozen=True)
class Cell:
    """One stage's success on one task: ``successes`` of ``scored`` episodes (layouts, for the blind
    baseline), with the rate's 95 % Wilson interval."""

    successes: int
    scored: int
    low: float
    high: float

    @property
    def rate(self) -> float | None:
        return self.successes / self.scored if self.scored else None


@dataclass(frozen=True)
class Row:
    task: str
    cells: dict[str, Cell | None]
    """By stage (every one of ``STAGES``): None where the stage did not run or has no figure."""


def blind_report(tasks: Sequence[str], seeds: Sequence[int], run_id: str, created_at: float) -> EvalReport:
    """The blind baseline as an evaluation report: per task with one (``ONE_CLICK_TASKS``), the best fixed
    click's hits over ``seeds``' layouts; ``overall`` only when every task has one (a sum over some of
    the tasks would not compare with the policies' overall)."""
    clicks = [c for task in tasks if (c := best_fixed_click(task, seeds)) is not None]
    rows = [_task(c.task, c.hits, c.layouts) for c in clicks]
    if clicks and len(clicks) == len(tasks):
        rows.append(_task(OVERALL, sum(c.hits for c in clicks), sum(c.layouts for c in clicks)))
    return EvalReport(
        run_id=run_id, policy="blind", environment=BLIND_ENVIRONMENT, samples=1, success_at=1.0,
        layouts=len(seeds), tasks=tuple(rows), created_at=created_at,
    )  # fmt: skip


def _task(name: str, hits: int, layouts: int) -> EvalTask:
    i = wilson(hits, layouts)
    rate = hits / layouts
    return EvalTask(task=name, episodes=layouts, scored=layouts, successes=hits, low=i.low, high=i.high,
                    pass_at={1: rate}, mean_reward=rate)  # fmt: skip


def stage_of(report: EvalReport) -> tuple[str, str] | None:
    """(learn run, stage) of a report ``learn`` published for a column of its table; None for any other
    evaluation (an SFT probe, ``cua-stream eval``'s, whose policy is a model, a script or a run)."""
    suffix = f"-{report.policy}"
    if report.policy not in STAGES or not report.run_id.startswith(EVAL_RUN_PREFIX):
        return None
    if not report.run_id.endswith(suffix) or len(report.run_id) <= len(EVAL_RUN_PREFIX) + len(suffix):
        return None
    return report.run_id[len(EVAL_RUN_PREFIX) : -len(suffix)], report.policy


def stage_table(reports: Mapping[str, EvalReport]) -> list[Row]:
    """The rows of ``reports`` (by stage): one per task the stages measured, in the order they first
    name it (the policies' before the blind baseline's), then ``overall``."""
    by_stage = {stage: {t.task: t for t in r.tasks} for stage, r in reports.items() if stage in STAGES}
    order = [s for s in STAGES if s != "blind"] + ["blind"]
    tasks = list(dict.fromkeys(t for s in order for t in by_stage.get(s, {}) if t != OVERALL))
    if any(OVERALL in tasks_of for tasks_of in by_stage.values()):
        tasks.append(OVERALL)
    return [Row(task, {s: _cell(by_stage.get(s, {}).get(task)) for s in STAGES}) for task in tasks]


def _cell(t: EvalTask | None) -> Cell | None:
    return None if t is None else Cell(t.successes, t.scored, t.low, t.high)


def cell_text(cell: Cell | None) -> str:
    """``rate [low, high] (successes/episodes)``; ``—`` for no figure (no scored episode, or none at all)."""
    if cell is None or cell.rate is None:
        return "—"
    return f"{cell.rate:.2f} [{cell.low:.2f}, {cell.high:.2f}] ({cell.successes}/{cell.scored})"


def rows_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The rows as ``curve.json`` and the dashboard hold them: each cell's numbers, and its ``text`` as the
    terminal prints it (the page shows that text, so both read the same: JavaScript's rounding of a tie
    such as 1/8 is not Python's)."""
    return [
        {"task": r.task, "cells": {s: None if c is None else _cell_json(c) for s, c in r.cells.items()}}
        for r in rows
    ]


def _cell_json(c: Cell) -> dict[str, Any]:
    return {"rate": c.rate, "successes": c.successes, "scored": c.scored, "low": c.low, "high": c.high,
            "text": cell_text(c)}  # fmt: skip
