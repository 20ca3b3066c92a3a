"""`cua-stream eval`'s benchmark table (a MiniWoB++ task set with no policy named, several scripted
policies, or ``eval table`` over saved results): per task, each policy's success with its 95 % Wilson
interval side by side, the blind baseline beside them, and the means over the literature's task subsets
beside the published numbers; printed, and saved as JSON and Markdown (docs/miniwob.md shows one)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cua_stream.app.evaluate.episodes import Evaluation
from cua_stream.app.stack import out
from cua_stream.evaluation import results as files
from cua_stream.evaluation.benchmark import COLUMNS, HEADINGS, Row, SubsetMean, rows, subset_mean
from cua_stream.evaluation.plan import EvalPlan
from cua_stream.evaluation.results import EvalEpisode, EvalResults
from cua_stream.evaluation.stats import Summary
from cua_stream.tasks.miniwob import PREFIX
from cua_stream.tasks.miniwob.literature import PUBLISHED, SUBSETS
from cua_stream.tasks.miniwob.verdict import DEFAULT_THRESHOLD

BLIND = "blind"
TABLE_POLICIES = ("oracle", "idle", "random", BLIND)
"""What a MiniWoB++ table shows: three scripted policies' episodes, and the blind baseline (measured on
shadow pages, no episode run)."""
BLIND_ENVIRONMENT = "shadow page (DevTools input)"
DASH = "—"


async def blind_results(tasks: Sequence[str], seeds: Sequence[int], run_id: str) -> EvalResults:
    """The blind baseline (``cua_stream.tasks.miniwob.blind``) of each of ``tasks`` that has one, measured
    on ``seeds`` in a headless Chromium of this process, as an evaluation's results (policy ``blind``)."""
    from cua_stream.devtools import headless_chromium
    from cua_stream.tasks.miniwob.blind import blind_baseline

    episodes: list[EvalEpisode] = []
    measured: list[str] = []
    async with headless_chromium() as browser:
        for task in tasks:
            started = time.monotonic()
            found = await blind_baseline(browser, task, seeds)
            if found is None:
                continue
            measured.append(task)
            took = (time.monotonic() - started) / max(len(seeds), 1)
            for seed, raw in found.raws:
                won = raw is not None and raw >= DEFAULT_THRESHOLD
                episodes.append(EvalEpisode(
                    episode_id=f"{run_id}-{task.removeprefix(PREFIX)}-{seed}", task=task, seed=seed, sample=0,
                    verdict="reward", reward=1.0 if won else 0.0, turns=1, seconds=took,
                    reason=f"fixed click at task pixel ({found.click.x}, {found.click.y}), chosen on "
                           f"{found.click.hits}/{found.click.layouts} layouts" if raw is not None else "never ended",
                ))  # fmt: skip
    return EvalResults(run_id=run_id, policy=BLIND, environment=BLIND_ENVIRONMENT, samples=1, seeds=list(seeds),
                       tasks=measured, created_at=time.time(), episodes=episodes)  # fmt: skip


def measure_blind(plan: EvalPlan, run: str, stem: Path) -> EvalResults:
    """The blind baseline of the plan's tasks on its layouts, saved as ``<stem>-blind.json``."""
    import anyio

    out.print(
        f"[bold]{BLIND}[/bold]: the best fixed click on shadow pages, {len(plan.seeds)} layout(s) per task"
    )
    results = anyio.run(blind_results, [t.name for t in plan.tasks], plan.seeds, run)
    files.save(stem.with_name(f"{stem.name}-{BLIND}.json"), results)
    return results


def load_runs(paths: Sequence[Path]) -> dict[str, EvalResults]:
    """Saved results by policy. Files of one policy are one run (the teacher measured in batches); a
    task measured in several is taken from the last of them (a task measured again after a fix)."""
    runs: dict[str, EvalResults] = {}
    for path in paths:
        r = files.load(path)
        if r.policy in runs:
            was, again = runs[r.policy], set(r.tasks)
            kept = [e for e in was.episodes if e.task not in again]
            r = EvalResults(run_id=was.run_id, policy=r.policy, environment=was.environment,
                            samples=was.samples, seeds=sorted({*was.seeds, *r.seeds}),
                            tasks=[*(t for t in was.tasks if t not in again), *r.tasks],
                            created_at=max(was.created_at, r.created_at), episodes=[*kept, *r.episodes])  # fmt: skip
        runs[r.policy] = r
    return runs


def _order(runs: Mapping[str, EvalResults]) -> list[str]:
    return [p for p in COLUMNS if p in runs] + [p for p in runs if p not in COLUMNS]


def _cell(s: Summary | None) -> str:
    if s is None or not s.scored:
        return DASH
    return f"{s.successes / s.scored:.2f} ({s.successes}/{s.scored}) [{s.interval.low:.2f}, {s.interval.high:.2f}]"


def _mean(m: SubsetMean, policy: str) -> str:
    if m.mean is None:
        return DASH
    text = f"{100 * m.mean:.1f} % over {m.measured}/{m.tasks}"
    if policy == "oracle" and m.measured < m.tasks and m.mean_all is not None:
        text += f" ({100 * m.mean_all:.1f} % over all {m.tasks})"
    return text + (f", pooled [{m.pooled.low:.2f}, {m.pooled.high:.2f}]" if m.pooled else "")


def task_table(runs: Mapping[str, EvalResults], success_at: float = 1.0) -> tuple[Table, list[Row]]:
    policies = _order(runs)
    table = Table("task", *(HEADINGS.get(p, p) for p in policies),
                  title="MiniWoB++: success per task, 95 % Wilson interval (— not measured)")  # fmt: skip
    found = rows(runs, success_at)
    for row in found:
        table.add_row(row.task, *(_cell(row.cells.get(p)) for p in policies))
    return table, found


def subsets_table(runs: Mapping[str, EvalResults], found: Sequence[Row]) -> Table:
    policies = _order(runs)
    table = Table("subset", *(HEADINGS.get(p, p) for p in policies), "published",
                  title="Means over the literature's task subsets, beside the published numbers")  # fmt: skip
    for name, tasks in SUBSETS.items():
        published = "; ".join(f"{p.who} {p.success}" for p in PUBLISHED if p.tasks == name)
        table.add_row(name, *(_mean(subset_mean(found, p, tasks, PREFIX), p) for p in policies), published)
    others = "; ".join(f"{p.who} {p.success} ({p.tasks})" for p in PUBLISHED if p.tasks not in SUBSETS)
    table.add_row("other published", *([""] * len(policies)), others)
    return table


def markdown(runs: Mapping[str, EvalResults], found: Sequence[Row]) -> str:
    """Both tables as Markdown, with where each run came from."""
    policies = _order(runs)
    head = ["task", *(HEADINGS.get(p, p) for p in policies)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([r.task, *(_cell(r.cells.get(p)) for p in policies)]) + " |" for r in found]
    lines += ["", "| subset | " + " | ".join(HEADINGS.get(p, p) for p in policies) + " | published |",
              "|" + "---|" * (len(policies) + 2)]  # fmt: skip
    for name, tasks in SUBSETS.items():
        published = "; ".join(f"{p.who} {p.success}" for p in PUBLISHED if p.tasks == name)
        means = [_mean(subset_mean(found, p, tasks, PREFIX), p) for p in policies]
        lines.append("| " + " | ".join([name, *means, published]) + " |")
    lines += ["", *(f"- {HEADINGS.get(p, p)}: run {r.run_id} on {r.environment}, {len(r.seeds)} layout(s) x "
                    f"{r.samples} sample(s) per task" for p, r in ((p, runs[p]) for p in policies))]  # fmt: skip
    return "\n".join(lines) + "\n"


def save(stem: Path, runs: Mapping[str, EvalResults], found: Sequence[Row]) -> tuple[Path, Path]:
    """``<stem>-table.md`` and ``<stem>-table.json`` (the cells as numbers)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, js = stem.with_name(f"{stem.name}-table.md"), stem.with_name(f"{stem.name}-table.json")
    md.write_text(markdown(runs, found))
    cells = {
        r.task: {p: None if s is None else {"successes": s.successes, "scored": s.scored,
                                            "low": s.interval.low, "high": s.interval.high}
                 for p, s in r.cells.items()}
        for r in found
    }  # fmt: skip
    js.write_text(json.dumps({"runs": {p: r.run_id for p, r in runs.items()}, "tasks": cells}, indent=1))
    return md, js


async def evaluate_each(
    evaluate: Callable[[Evaluation, str, Path], Awaitable[None]], ev: Evaluation, run: str,
    policies: Sequence[str], stem: Path,
) -> dict[str, EvalResults]:  # fmt: skip
    """Each scripted policy on the plan's tasks it plays (the oracle: the teacher's), one evaluation after
    another on the same stack (``evaluate``: eval's own, which prints, publishes and saves one), each
    saved as ``<stem>-<policy>.json``; their results by policy."""
    from cua_stream.tasks.policy_server import plays

    runs: dict[str, EvalResults] = {}
    for p in policies:
        tasks = tuple(t for t in ev.plan.tasks if plays(p, t.name))
        if not tasks:
            out.print(f"    {p} plays none of these tasks")
            continue
        plan = EvalPlan(tasks=tasks, samples=ev.plan.samples, seeds=ev.plan.seeds)
        path = stem.with_name(f"{stem.name}-{p}.json")
        out.print(
            f"[bold]{p}[/bold]: {len(tasks)} task(s) x {len(plan.seeds)} layout(s) x {plan.samples} sample(s)"
        )
        await evaluate(
            Evaluation(plan=plan, producer=ev.producer, sampling=ev.sampling, teacher=p), f"{run}-{p}", path
        )
        runs[p] = files.load(path)
    return runs


def show_table(console: Console, runs: Mapping[str, EvalResults], success_at: float, stem: Path) -> None:
    """The benchmark table of ``runs`` printed, and saved beside ``stem``."""
    table, found = task_table(runs, success_at)
    console.print(table)
    console.print(subsets_table(runs, found))
    md, js = save(stem, runs, found)
    out.print(f"Table written to [bold]{md}[/bold] and [bold]{js}[/bold]")
