"""`cua-stream chaos`: the whole loop under a seeded fault schedule, then the invariants from the topics."""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cua_stream.cli.common import ConfigFile, friendly_errors, load_file
from cua_stream.cli.defaults import field_option

if TYPE_CHECKING:
    from cua_stream.app.chaos.report import ChaosReport

out = Console(highlight=False)


@friendly_errors
def chaos(
    mode: Annotated[
        str | None, field_option("chaos", "mode", help="fast (scripted episodes) or real (local desktops).")
    ] = None,
    seed: Annotated[int | None, field_option("chaos", "seed", help="Seeds the fault schedule.")] = None,
    faults: Annotated[int | None, field_option("chaos", "faults", help="Faults to inject.")] = None,
    every: Annotated[
        float | None, field_option("chaos", "every_s", help="Mean seconds between faults.")
    ] = None,
    steps: Annotated[
        int | None,
        field_option(
            "chaos",
            "steps",
            help="GRPO steps the trainer takes at least; it trains on until every fault has healed.",
        ),
    ] = None,
    producers: Annotated[int | None, field_option("chaos", "producers", help="Producer processes.")] = None,
    concurrency: Annotated[
        int | None, field_option("chaos", "concurrency", help="Episodes per producer at once.")
    ] = None,
    group_size: Annotated[
        int | None, field_option("chaos", "group_size", help="Episodes per GRPO group.")
    ] = None,
    groups_per_step: Annotated[
        int | None, field_option("chaos", "groups_per_step", help="Groups per step.")
    ] = None,
    duration: Annotated[
        float | None,
        field_option(
            "chaos", "duration_s", help="A soak: run this many seconds, the trainer without a step limit."
        ),
    ] = None,
    sample_every: Annotated[
        float | None, field_option("chaos", "sample_every_s", help="Seconds between resource samples.")
    ] = None,
    base_port: Annotated[
        int | None,
        field_option(
            "chaos", "base_port", help="First of the run's ports, below the kernel's ephemeral range."
        ),
    ] = None,
    home: Annotated[
        str | None, field_option("chaos", "home", help="Run directory (broker data, logs, report).")
    ] = None,
    secure: Annotated[
        bool | None,
        field_option(
            "chaos",
            "secure",
            "--secure/--no-secure",
            help="SASL_SSL broker with ACLs, each daemon its own principal.",
        ),
    ] = None,
    config: ConfigFile = None,
) -> None:
    """Run broker, engine, gateway, scorer, producers and trainer as separate processes while a seeded
    schedule SIGKILLs and restarts them, SIGSTOPs them, restarts the broker and writes undecodable
    records; then check from the topics that nothing was lost or trained twice (exit 1 if anything was).
    The report is also written to <home>/report.json.

    Example: cua-stream chaos --faults 30 --every 3 --steps 12 --seed 2"""
    import anyio

    from cua_stream.app.chaos.config import ChaosConfig
    from cua_stream.app.chaos.report import fault_rows, save_json, summary_line, tail_lines
    from cua_stream.app.chaos.runner import Chaos
    from cua_stream.config import build

    cfg = build(
        ChaosConfig,
        file_data=load_file(config),
        overrides={
            "mode": mode,
            "seed": seed,
            "faults": faults,
            "every_s": every,
            "steps": steps,
            "producers": producers,
            "concurrency": concurrency,
            "group_size": group_size,
            "groups_per_step": groups_per_step,
            "duration_s": duration,
            "sample_every_s": sample_every,
            "base_port": base_port,
            "home": home,
            "secure": secure,
        },
    )
    if cfg.mode == "real":
        from cua_stream.desktop.doctor import require_desktop

        require_desktop()
    # the run's own clients (sampling, poison records) retry through every broker restart it causes
    logging.getLogger("cua_stream.bus").setLevel(logging.ERROR)
    runner = Chaos(cfg, emit=lambda line: out.print(line, markup=False))
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the run the way Ctrl-C does: cleanly
    report = anyio.run(runner.run)
    faults_table = Table("target", "action", "applied", "recovery p50 / max (s)", title="faults")
    for row in fault_rows(report.applied):
        faults_table.add_row(*row)
    out.print(faults_table)
    checks = Table("invariant", "checked", "lost", "duplicated", "result", title=f"run {report.run_id}")
    for c in report.checks:
        result = "[green]ok[/green]" if c.ok else "[red]" + escape("; ".join(c.problems[:3])) + "[/red]"
        checks.add_row(c.name, str(c.checked), str(c.lost), str(c.duplicated), result)
    out.print(checks)
    out.print(summary_line(report))
    _resources(report)
    for line in tail_lines(report):
        out.print(line)
    save_json(report)
    if not report.ok:
        raise typer.Exit(1)


def _resources(report: ChaosReport) -> None:
    from cua_stream.app.chaos.report import lag_lines, memory_rows, save_plot

    table = Table("daemon", "memory early (MB)", "late (MB)", "peak (MB)", "bounded", "loop lag p50 / p99 / max (ms)",
                  title="resources (early: 2nd quarter median, late: last quarter median)")  # fmt: skip
    for row in memory_rows(report.points):
        verdict = f"[green]{row.verdict}[/green]" if row.bounded else f"[red]{row.verdict}[/red]"
        table.add_row(*row.cells, verdict, row.loop_lag)
    out.print(table)
    for line in lag_lines(report.points):
        out.print(line)
    if (path := save_plot(report)) is not None:
        out.print(f"plot: {path}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
