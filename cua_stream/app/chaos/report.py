"""What a chaos run reports: the faults as applied, the invariants, the daemons' exits, the resources."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cua_stream.app.chaos.fault_schedule import Fault, kind
from cua_stream.app.chaos.invariants import Check, totals
from cua_stream.app.chaos.resource_usage import Point, plot
from cua_stream.app.chaos.soak import memory_growth, spreads


@dataclass
class Applied:
    fault: Fault
    at_s: float
    """When it was applied (seconds after the start; later than planned when its target was busy)."""
    recovered_s: float | None = None
    """How long until the target answered again (kill, broker restart)."""


@dataclass
class ChaosReport:
    run_id: str
    home: Path
    applied: list[Applied]
    skipped: list[Fault]
    checks: list[Check]
    crashes: dict[str, list[int]]
    starts: dict[str, int]
    wall_s: float
    steps: int
    episodes: int
    points: list[Point] = field(default_factory=list)
    """Memory, event-loop lag and consumer lag samples (plotted to ``<home>/resources.png``)."""
    discards: dict[str, int] = field(default_factory=dict)
    """Episodes scored as discards, by reason (what the faults did to episodes in flight)."""
    drops: dict[str, int] = field(default_factory=dict)
    """Groups dropped by the trainer, by reason."""

    principals: dict[str, str] = field(default_factory=dict)
    """A secured run: the principal each daemon connected as (empty: the broker had no authentication)."""
    soak: bool = False
    """A timed run: its memory must also stay bounded (in a run of kills, restarts reset it anyway)."""

    @property
    def ok(self) -> bool:
        memory = all(g.bounded for g in memory_growth(self.points)) if self.soak else True
        return all(c.ok for c in self.checks) and memory

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "ok": self.ok,
            "wall_s": round(self.wall_s, 1),
            "steps": self.steps,
            "episodes": self.episodes,
            "faults": [
                {"planned_s": a.fault.at_s, "at_s": round(a.at_s, 2), "target": a.fault.target,
                 "action": a.fault.action.value, "hold_s": a.fault.hold_s,
                 "recovered_s": None if a.recovered_s is None else round(a.recovered_s, 2)}
                for a in self.applied
            ],
            "skipped": len(self.skipped),
            "checks": [
                {"name": c.name, "checked": c.checked, "lost": c.lost, "duplicated": c.duplicated,
                 "problems": list(c.problems[:20])}
                for c in self.checks
            ],
            "crashes": self.crashes,
            "starts": self.starts,
            "principals": self.principals,
            "discards": self.discards,
            "drops": self.drops,
            "memory": [
                {"daemon": g.name, "early_mb": round(g.early_mb, 1), "late_mb": round(g.late_mb, 1),
                 "peak_mb": round(g.peak_mb, 1), "bounded": g.bounded}
                for g in memory_growth(self.points)
            ],
            "loop_lag_s": {s.name: [s.p50, s.p99, s.max] for s in spreads(self.points, "loop")},
            "consumer_lag": {s.name: [s.p50, s.p99, s.max] for s in spreads(self.points, "lag")},
        }  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# The report as the command shows it: rows and lines of plain text (the command colours and prints them).


def fault_rows(applied: list[Applied]) -> list[tuple[str, str, str, str]]:
    """(target kind, action, times applied, recovery ``p50 / max`` seconds or ``-``), sorted."""
    by_kind: dict[tuple[str, str], list[float]] = {}
    for a in applied:
        key = (kind(a.fault.target), a.fault.action.value)
        by_kind.setdefault(key, [])
        if a.recovered_s is not None:
            by_kind[key].append(a.recovered_s)
    counts = Counter((kind(a.fault.target), a.fault.action.value) for a in applied)
    rows = []
    for (target, action), n in sorted(counts.items()):
        rec = sorted(by_kind[(target, action)])
        shown = f"{rec[len(rec) // 2]:.1f} / {rec[-1]:.1f}" if rec else "-"
        rows.append((target, action, str(n), shown))
    return rows


def summary_line(report: ChaosReport) -> str:
    """Faults, steps, episodes, what was lost or duplicated, and the exits nobody asked for."""
    lost, duplicated = totals(report.checks)
    crashed = {n: codes for n, codes in report.crashes.items() if codes}
    return (
        f"{len(report.applied)} faults applied ({len(report.skipped)} not applied: the run was stopping), "
        f"{report.steps} steps, {report.episodes} episodes in {report.wall_s:.0f}s; lost {lost}, "
        f"duplicated {duplicated}; exits nobody asked for: "
        + (", ".join(f"{n} {codes}" for n, codes in sorted(crashed.items())) or "none")
    )


@dataclass(frozen=True)
class MemoryRow:
    """One daemon's line of the resources table."""

    cells: tuple[str, str, str, str]
    """Daemon, memory early, late and peak (MB)."""
    bounded: bool
    verdict: str
    """``yes``, or ``no (+N MB)``."""
    loop_lag: str
    """Event-loop lag ``p50 / p99 / max`` (ms), or ``-``."""


def memory_rows(points: list[Point]) -> list[MemoryRow]:
    loops = {s.name: s for s in spreads(points, "loop")}
    rows = []
    for g in memory_growth(points):
        lag = loops.get(g.name)
        shown = f"{lag.p50 * 1e3:.0f} / {lag.p99 * 1e3:.0f} / {lag.max * 1e3:.0f}" if lag else "-"
        verdict = "yes" if g.bounded else f"no (+{g.grew_mb:.0f} MB)"
        cells = (g.name, f"{g.early_mb:.0f}", f"{g.late_mb:.0f}", f"{g.peak_mb:.0f}")
        rows.append(MemoryRow(cells, g.bounded, verdict, shown))
    return rows


def lag_lines(points: list[Point]) -> list[str]:
    """Each consumer group's lag spread."""
    return [
        f"consumer group {s.name}: lag p50 {s.p50:.0f}, p99 {s.p99:.0f}, max {s.max:.0f} records"
        for s in spreads(points, "lag")
    ]


def tail_lines(report: ChaosReport) -> list[str]:
    """What the faults did to episodes and groups, the principals of a secured run, where the run lives."""
    lines = []
    for what, counts in (("episodes discarded", report.discards), ("groups dropped", report.drops)):
        shown = ", ".join(f"{reason} x{n}" for reason, n in sorted(counts.items())) or "none"
        lines.append(f"{what}: {shown}")
    if report.principals:
        lines.append(
            "principals (SASL_SSL): " + ", ".join(f"{n} as {p}" for n, p in sorted(report.principals.items()))
        )
    lines.append(f"logs, checkpoints and broker data: {report.home}")
    return lines


def save_plot(report: ChaosReport) -> Path | None:
    """The resources plot at ``<home>/resources.png``; None when the run sampled nothing."""
    if not report.points:
        return None
    path = report.home / "resources.png"
    plot(report.points, path, f"{report.run_id}: {len(report.applied)} faults, {report.steps} steps")
    return path


def save_json(report: ChaosReport) -> Path:
    path = report.home / "report.json"
    path.write_text(json.dumps(report.to_json(), indent=1))
    return path
