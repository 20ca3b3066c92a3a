"""What a chaos run reports: the faults as applied, the invariants, the daemons' exits, the resources."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cua_stream.app.chaos.fault_schedule import Fault
from cua_stream.app.chaos.invariants import Check
from cua_stream.app.chaos.resource_usage import Point
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
