"""A benchmark table: per task, each policy's success with its Wilson interval, beside the others
(``eval run --tasks miniwob``: the teacher, idle, random and the blind baseline), and the mean over a subset of
tasks (the literature's), beside the published numbers. Pure: results in, rows out.

**The subset means.** Each is the mean over the subset's tasks of the per-task success rate (the papers
report it so), over the tasks the policy was measured on; how many those are is shown beside it. The
teacher's mean also counts the subset's tasks it does not play as failures ("all tasks"), so a number
that leaves tasks out is never mistaken for one that does not. The pooled interval is the Wilson interval
of all the subset's measured episodes together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cua_stream.evaluation.results import EvalResults
from cua_stream.evaluation.stats import OVERALL, Interval, Summary, by_task, wilson

COLUMNS = ("oracle", "idle", "random", "blind")
"""The policies a MiniWoB++ table shows, in order (the oracle of MiniWoB++ tasks is the teacher)."""
HEADINGS = {"oracle": "teacher", "idle": "idle", "random": "random", "blind": "blind (best fixed click)"}


@dataclass(frozen=True)
class Row:
    task: str
    cells: Mapping[str, Summary | None]
    """By policy; None: not measured (the teacher does not play it, or no fixed click solves it)."""


def rows(runs: Mapping[str, EvalResults], success_at: float = 1.0) -> list[Row]:
    """One row per task any run measured, in name order; ``runs`` by policy."""
    per_policy = {p: by_task(r.episodes, success_at) for p, r in runs.items()}
    tasks = sorted({t for summaries in per_policy.values() for t in summaries if t != OVERALL})
    return [Row(t, {p: per_policy[p].get(t) for p in runs}) for t in tasks]


@dataclass(frozen=True)
class SubsetMean:
    """A policy's mean success over a subset's tasks."""

    tasks: int
    """The subset's size."""
    measured: int
    """Its tasks the policy was measured on."""
    mean: float | None
    """The mean per-task success over the measured tasks."""
    mean_all: float | None
    """The mean over all the subset's tasks, the unmeasured ones counted as 0."""
    pooled: Interval | None
    """The Wilson interval of the measured tasks' episodes together."""


def subset_mean(table: Sequence[Row], policy: str, subset: Sequence[str], prefix: str = "") -> SubsetMean:
    """``policy``'s mean over the tasks of ``subset`` (names without ``prefix``, the table's have it)."""
    cells = {r.task: r.cells.get(policy) for r in table}
    measured = [s for t in subset if (s := cells.get(prefix + t)) is not None and s.scored]
    if not measured:
        return SubsetMean(len(subset), 0, None, None, None)
    rates = [s.successes / s.scored for s in measured]
    wins, scored = sum(s.successes for s in measured), sum(s.scored for s in measured)
    return SubsetMean(len(subset), len(measured), sum(rates) / len(rates), sum(rates) / len(subset),
                      wilson(wins, scored))  # fmt: skip
