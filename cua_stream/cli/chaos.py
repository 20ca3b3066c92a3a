"""`cua-stream chaos`: the whole loop under a seeded fault schedule, then the invariants from the topics."""

from __future__ import annotations

import json
import logging
import signal
from collections import Counter
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
    from cua_stream.app.chaos.fault_schedule import kind
    from cua_stream.app.chaos.invariants import totals
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
    by_kind: dict[tuple[str, str], list[float]] = {}
    for a in report.applied:
        key = (kind(a.fault.target), a.fault.action.value)
        by_kind.setdefault(key, [])
        if a.recovered_s is not None:
            by_kind[key].append(a.recovered_s)
    counts = Counter((kind(a.fault.target), a.fault.action.value) for a in report.applied)
    for (target, action), n in sorted(counts.items()):
        rec = sorted(by_kind[(target, action)])
        shown = f"{rec[len(rec) // 2]:.1f} / {rec[-1]:.1f}" if rec else "-"
        faults_table.add_row(target, action, str(n), shown)
    out.print(faults_table)
    checks = Table("invariant", "checked", "lost", "duplicated", "result", title=f"run {report.run_id}")
    for c in report.checks:
        result = "[green]ok[/green]" if c.ok else "[red]" + escape("; ".join(c.problems[:3])) + "[/red]"
        checks.add_row(c.name, str(c.checked), str(c.lost), str(c.duplicated), result)
    out.print(checks)
    lost, duplicated = totals(report.checks)
    crashed = {n: codes for n, codes in report.crashes.items() if codes}
    out.print(
        f"{len(report.applied)} faults applied ({len(report.skipped)} not applied: the run was stopping), "
        f"{report.steps} steps, {report.episodes} episodes in {report.wall_s:.0f}s; lost {lost}, "
        f"duplicated {duplicated}; exits nobody asked for: "
        + (", ".join(f"{n} {codes}" for n, codes in sorted(crashed.items())) or "none")
    )
    _resources(report)
    for what, counts in (("episodes discarded", report.discards), ("groups dropped", report.drops)):
        shown = ", ".join(f"{reason} x{n}" for reason, n in sorted(counts.items())) or "none"
        out.print(f"{what}: {shown}")
    if report.principals:
        out.print(
            "principals (SASL_SSL): " + ", ".join(f"{n} as {p}" for n, p in sorted(report.principals.items()))
        )
    out.print(f"logs, checkpoints and broker data: {report.home}")
    (report.home / "report.json").write_text(json.dumps(report.to_json(), indent=1))
    if not report.ok:
        raise typer.Exit(1)


def _resources(report: ChaosReport) -> None:
    from cua_stream.app.chaos.resource_usage import plot
    from cua_stream.app.chaos.soak import memory_growth, spreads

    table = Table("daemon", "memory early (MB)", "late (MB)", "peak (MB)", "bounded", "loop lag p50 / p99 / max (ms)",
                  title="resources (early: 2nd quarter median, late: last quarter median)")  # fmt: skip
    loops = {s.name: s for s in spreads(report.points, "loop")}
    for g in memory_growth(report.points):
        lag = loops.get(g.name)
        shown = f"{lag.p50 * 1e3:.0f} / {lag.p99 * 1e3:.0f} / {lag.max * 1e3:.0f}" if lag else "-"
        ok = "[green]yes[/green]" if g.bounded else f"[red]no (+{g.grew_mb:.0f} MB)[/red]"
        table.add_row(g.name, f"{g.early_mb:.0f}", f"{g.late_mb:.0f}", f"{g.peak_mb:.0f}", ok, shown)
    out.print(table)
    for s in spreads(report.points, "lag"):
        out.print(f"consumer group {s.name}: lag p50 {s.p50:.0f}, p99 {s.p99:.0f}, max {s.max:.0f} records")
    if report.points:
        path = report.home / "resources.png"
        plot(report.points, path, f"{report.run_id}: {len(report.applied)} faults, {report.steps} steps")
        out.print(f"plot: {path}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
