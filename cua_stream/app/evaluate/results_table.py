"""`cua-stream eval`'s tables: one run per task and overall, and two runs compared."""

from __future__ import annotations

from rich.table import Table

from cua_stream.evaluation.results import EvalResults
from cua_stream.evaluation.stats import OVERALL, Difference, Interval, Summary, by_task, compare


def results_table(results: EvalResults, success_at: float = 1.0) -> Table:
    k = results.samples
    table = Table(
        "task", "episodes", "success", "95% CI", "pass@1", *([f"pass@{k}"] if k > 1 else []),
        "reward", "turns/ep.", "s/ep.", "other verdicts",
        title=f"eval {results.run_id}: {results.policy} on {results.environment}, "
              f"{len(results.seeds)} layout(s) x {k} sample(s) per task",
    )  # fmt: skip
    for task, s in by_task(results.episodes, success_at).items():
        if task == OVERALL:
            table.add_section()
        passes = [_num(s.pass_at.get(1))] + ([_num(s.pass_at.get(k))] if k > 1 else [])
        table.add_row(
            task, str(s.episodes), _rate(s), _interval(s.interval) if s.scored else "-", *passes,
            _num(s.mean_reward), _num(s.mean_turns, "{:.1f}"), _num(s.mean_seconds, "{:.1f}"), _others(s),
        )  # fmt: skip
    return table


def comparison_table(a: EvalResults, b: EvalResults, success_at: float = 1.0) -> Table:
    table = Table(
        "task", f"A: {a.run_id}", f"B: {b.run_id}", "B - A", "95% CI", "significant",
        title=f"A {a.policy} vs B {b.policy} (success; Newcombe interval of the difference)",
    )  # fmt: skip
    for task, d in compare(a.episodes, b.episodes, success_at).items():
        if task == OVERALL:
            table.add_section()
        table.add_row(task, _rate(d.a), _rate(d.b), _delta(d), _interval(d.interval) if d.interval else "-",
                      "yes" if d.significant else "no")  # fmt: skip
    return table


def _rate(s: Summary) -> str:
    rate = s.success_rate
    return "-" if rate is None else f"{rate:.2f} ({s.successes}/{s.scored})"


def _interval(i: Interval) -> str:
    return f"[{i.low:.2f}, {i.high:.2f}]"


def _delta(d: Difference) -> str:
    return "-" if d.delta is None else f"{d.delta:+.2f}"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _others(s: Summary) -> str:
    """Every verdict but a clean finish: scored-0 reasons, discards, episodes never scored."""
    parts = [f"{reason} x{n}" for reason, n in s.verdicts.items() if reason != "ok"]
    parts += [f"discard: {reason} x{n}" for reason, n in s.discards.items()]
    parts += [f"unscored x{s.unscored}"] if s.unscored else []
    return ", ".join(parts)
