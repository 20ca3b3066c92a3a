"""`cua-stream runs compare`: runs side by side, step by step, from their records on the topics (a run and
its retrains, or any runs): per step loss, KL, clip fraction, grad norm and logprob gap, what each run's
settings changed against the first's, as a table, JSON or a chart image."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import anyio
import typer

from consumers.trainer.retrain.compare import (
    COMPARED,
    Series,
    compare,
    document,
    figure,
    header_lines,
    render,
    table,
)
from consumers.trainer.retrain.rerun import RecordedRun, parse_steps, read_recorded
from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, make_bus, output_problem
from cua_stream.config import BusConfig

app = typer.Typer(
    help="Training runs from their records: side by side.\n\nExample: cua-stream runs compare r1 r1-kl",
    no_args_is_help=True,
)


async def read_runs(bus: BusConfig, runs: list[str]) -> list[RecordedRun]:
    return [await read_recorded(bus, bus.topic_prefix, run) for run in runs]


@app.command("compare")
@friendly_errors
def compare_runs(
    runs: Annotated[list[str], typer.Argument(help="The runs, the first the baseline (e.g. r1 r1-kl).")],
    steps: Annotated[str, typer.Option(help="The steps: A..B, A.., ..B or A (default: all).")] = "",
    chart: Annotated[Path | None, typer.Option(help="Also draw the figures per step to this PNG.")] = None,
    json_: Annotated[bool, typer.Option("--json", help="One JSON document instead of the table.")] = False,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Per step, each run's loss, KL, clip fraction, grad norm and logprob gap (its TrainStep records),
    and what each run's settings changed against the first run's (its TrainerSettings records).

    Example: cua-stream runs compare r1 r1-kl --steps 5..8 --chart compare.png"""
    first, last = parse_steps(steps)
    if chart is not None and (problem := output_problem(chart)):
        raise typer.BadParameter(problem, param_hint="--chart")
    bus = make_bus(bootstrap, prefix, config)
    series = compare(anyio.run(read_runs, bus, runs), first, last)
    if json_:
        print(json.dumps(document(series), indent=1))
    else:
        print("\n".join([*header_lines(series), "", render(table(series))]))
    if chart is not None:
        draw(series, chart)
        if not json_:
            print(f"chart: {chart}")


def draw(series: list[Series], path: Path) -> None:
    """One panel per figure, a line per run, over the steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4 * len(COMPARED), 3.6))
    for ax, name in zip(axes, COMPARED, strict=True):
        for s in series:
            points = [(k, v) for k, r in sorted(s.steps.items()) if (v := figure(r, name)) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), "-o", markersize=3, label=s.run_id, alpha=0.85)
        ax.set(title=name, xlabel="step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
