"""`cua-stream tasks export miniwob DIR`: the MiniWoB++ suite as Harbor computer-1 task directories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cua_stream.cli.common import friendly_errors

app = typer.Typer(
    help="Task suites as Harbor computer-1 task directories.\n\n"
    "Example: cua-stream tasks export miniwob my-miniwob",
    no_args_is_help=True,
)
out = Console(highlight=False)


@app.command()
@friendly_errors
def export(
    suite: Annotated[str, typer.Argument(help="The suite: miniwob (MiniWoB++, the installed package).")],
    dest: Annotated[Path, typer.Argument(help="Where the task directories go (DEST/<task>/).")],
    threshold: Annotated[
        float, typer.Option(help="The raw reward that counts as success (1.0: MiniWoB++'s binary reward).")
    ] = 1.0,
    task_threshold: Annotated[
        list[str] | None,
        typer.Option(help="NAME=RAW: one task's threshold (e.g. circle-center=0.8); repeatable."),
    ] = None,
) -> None:
    """Write one task directory per task of the suite from one template; list the tasks left out, each
    with its reason, and the tasks whose reward is continuous (give those a --task-threshold).

    Example: cua-stream tasks export miniwob my-miniwob --task-threshold circle-center=0.8"""
    from cua_stream.cli.common import output_problem
    from cua_stream.tasks.miniwob import SUITE
    from cua_stream.tasks.miniwob.export import export as write
    from cua_stream.tasks.miniwob.export import thresholds_for
    from cua_stream.tasks.miniwob.suite import installed_suite

    if suite != SUITE:
        raise typer.BadParameter(f"unknown suite {suite!r}; known: {SUITE}", param_hint="SUITE")
    per_task = _thresholds(task_threshold or [])
    if (problem := output_problem(dest, directory=True)) is not None:
        raise typer.BadParameter(problem, param_hint="DEST")
    found = installed_suite()
    thresholds = thresholds_for(found, threshold, per_task)
    dest.mkdir(exist_ok=True)
    written = write(found, dest, thresholds)
    out.print(f"exported {len(written)} MiniWoB++ {found.version} tasks to {dest}")
    left = Table("left out", "why", title=f"{len(found.left_out)} pages left out")
    for name, why in found.left_out:
        left.add_row(name, why)
    out.print(left)
    continuous = [t.name for t in found.tasks if t.continuous]
    out.print(
        "continuous rewards (success is raw reward >= the threshold): "
        + ", ".join(f"{n} ({thresholds[n]:g})" for n in continuous)
    )
    out.print(f"run them: cua-stream eval run --tasks '{dest}/*' ... (or by name: --tasks miniwob)")


def _thresholds(pairs: list[str]) -> dict[str, float]:
    found: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            found[name.strip().removeprefix("miniwob/")] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise typer.BadParameter(f"expected NAME=RAW, got {pair!r}", param_hint="--task-threshold")
    return found
