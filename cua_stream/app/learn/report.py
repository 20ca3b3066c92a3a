"""What `cua-stream learn` shows at its end: the reward curve read back from the run's topics, the table
of success per task of the blind baseline and the base, SFT and GRPO policies (95 % intervals, the
episodes behind each: ``cua_stream.learn_table``), where the time went, and the curve as a PNG and JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from cua_stream.app.stack import out
from cua_stream.config import BusConfig

if TYPE_CHECKING:
    from cua_stream.app.learn.plan import Curve, LearnPlan
    from cua_stream.evaluation.results import EvalResults
    from cua_stream.events import EvalReport, TrainStep
    from cua_stream.learn_table import Row


async def curve_of(bus: BusConfig, run_id: str, model: Path) -> Curve:
    from transformers import AutoTokenizer

    from cua_stream.app.learn.plan import reward_curve
    from cua_stream.bus.reader import scan
    from cua_stream.events import TrainStep
    from cua_stream.topics import SCORES, TRAIN_STEPS, TURNS, WORK

    steps = [d.event async for d in scan(bus, TRAIN_STEPS) if d.event.run_id == run_id]
    steps = [s for s in steps if isinstance(s, TrainStep)]  # the topic also carries the dropped groups
    work = [d.event async for d in scan(bus, WORK) if d.event.run_id == run_id]
    scores = [d.event async for d in scan(bus, SCORES) if d.event.run_id == run_id]
    tokenizer = AutoTokenizer.from_pretrained(model)
    replies: dict[str, list[str]] = {}
    async for d in scan(bus, TURNS):
        if d.event.run_id == run_id:
            text = tokenizer.decode(list(d.event.completion_ids), skip_special_tokens=True)
            replies.setdefault(d.event.group_id, []).append(text)
    return reward_curve(steps, work, scores, replies)  # type: ignore[arg-type]


def report(
    plan: LearnPlan, curve: Curve, blind: EvalReport, evaluated: dict[str, EvalResults], trained: list[TrainStep],
    timings: dict[str, float], probes: list[dict[str, Any]], home: Path, run: str, total_s: float,
) -> None:  # fmt: skip
    """``blind``: the blind baseline's report; ``evaluated``: the evaluations by policy name (base, sft,
    grpo), their files in ``home/eval``."""
    from cua_stream.app.learn.plan import evaluation_entry
    from cua_stream.app.learn.trend import trend, trend_text
    from cua_stream.evaluation.report import report_of
    from cua_stream.learn_table import rows_json, stage_table

    rows = stage_table({"blind": blind} | {name: report_of(r) for name, r in evaluated.items()})
    files = {name: home / "eval" / f"{name}.json" for name in evaluated}
    if {"sft", "grpo"} <= set(files):
        out.print(f"results files in {home / 'eval'}; did GRPO beat SFT (the difference, its interval): "
                  f"[bold]cua-stream eval compare {files['sft']} {files['grpo']}[/bold]")  # fmt: skip
    first, last = curve.ends(plan.window)
    out.print(
        f"mean reward, first {plan.window} GRPO steps -> last {plan.window}: {first:.3f} -> {last:.3f} "
        f"({last - first:+.3f}) over {len(curve.steps)} steps"
    )
    shuffled = trend(curve.overall, plan.window)
    if shuffled is not None:
        out.print(trend_text(shuffled, plan.window))
    valid_first, valid_last = curve.valid_ends(plan.window)
    out.print(f"replies carrying a valid action: {valid_first:.0%} -> {valid_last:.0%}")
    train_s = sum(s.metrics.get("train_s", 0.0) for s in trained)
    save_s = sum(s.metrics.get("save_s", 0.0) for s in trained)
    parts = {**timings, "  of which GRPO forward/backward": train_s, "  of which weight saves": save_s}
    out.print("where the time went: " + "; ".join(f"{k.strip()} {v / 60:.1f} min" for k, v in parts.items())
              + f"; total {total_s / 60:.1f} min")  # fmt: skip
    png = home / "curve.png"
    plot(curve, png, f"{run}: reward per GRPO step (after SFT)")
    (home / "curve.json").write_text(
        json.dumps({"steps": curve.steps, "overall": curve.overall, "by_task": curve.by_task,
                    "valid_actions": curve.valid,
                    "trend": shuffled.as_json() if shuffled else None,
                    "evaluations": {name: evaluation_entry(r, str(files[name])) for name, r in evaluated.items()},
                    "table": rows_json(rows),
                    "sft_probes": probes,
                    "timings_s": {**timings, "train_s": train_s, "save_s": save_s, "total_s": total_s}}, indent=1)
    )  # fmt: skip
    out.print(f"curve: {png} (and curve.json); the dashboard shows the same per step and task, and the "
              f"table below: [bold]cua-stream dashboard --model-path {home / 'base'}[/bold]")  # fmt: skip
    out.print(stages_table(rows, f"run {run}: success per task (95% Wilson interval, successes/episodes): "
                                 f"the blind baseline over {blind.layouts} layouts, the policies on "
                                 f"{plan.eval_episodes} held-out layout(s)"))  # fmt: skip


def stages_table(rows: list[Row], title: str) -> Table:
    """``learn``'s closing table: a column per stage (``learn_table.STAGES``), ``—`` where it has no figure."""
    from cua_stream.evaluation.stats import OVERALL
    from cua_stream.learn_table import HEADINGS, STAGES, cell_text

    table = Table("task", *(HEADINGS[s] for s in STAGES), title=title)
    for row in rows:
        if row.task == OVERALL:
            table.add_section()
        table.add_row(row.task, *(cell_text(row.cells[s]) for s in STAGES))
    return table


def plot(curve: Curve, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(curve.steps, curve.overall, "k-o", label="all tasks", linewidth=2)
    for task, values in curve.by_task.items():
        points = [(s, v) for s, v in zip(curve.steps, values, strict=True) if v is not None]
        if points and len(curve.by_task) > 1:
            ax.plot(*zip(*points, strict=True), "--.", label=task, alpha=0.7)
    if curve.valid:
        ax.plot(curve.steps, curve.valid, ":", color="grey", label="share of replies with a valid action")
    ax.set(xlabel="GRPO step", ylabel="mean reward", ylim=(-0.05, 1.05), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
