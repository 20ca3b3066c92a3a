"""Reading a soak's samples: does any daemon's memory keep growing, how late did the event loops run, how
far behind did the consumer groups fall. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from cua_stream.app.chaos.resource_usage import Point
from cua_stream.metrics import quantile

GROWTH_ABS_MB = 48.0
GROWTH_REL = 0.05
"""Memory counts as bounded when its late level exceeds its early level by at most the larger of these
(allocators and caches settle in steps; a leak keeps climbing through the run)."""


@dataclass(frozen=True)
class Growth:
    name: str
    early_mb: float
    """Median over the run's second quarter (after start-up and warm caches)."""
    late_mb: float
    """Median over its last quarter."""
    peak_mb: float

    @property
    def grew_mb(self) -> float:
        return self.late_mb - self.early_mb

    @property
    def bounded(self) -> bool:
        return self.grew_mb <= max(GROWTH_ABS_MB, GROWTH_REL * self.early_mb)


@dataclass(frozen=True)
class Spread:
    name: str
    p50: float
    p99: float
    max: float


def _series(points: Iterable[Point], kind: str) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in points:
        if p.series.startswith(kind + ":"):
            out.setdefault(p.series.split(":", 1)[1], []).append(p)
    return out


def memory_growth(points: list[Point]) -> list[Growth]:
    """Per daemon: early vs late resident memory (quarters of the run's time span)."""
    span = max((p.t_s for p in points), default=0.0)
    out = []
    for name, ps in sorted(_series(points, "rss").items()):
        early = [p.value for p in ps if span / 4 <= p.t_s < span / 2] or [ps[0].value]
        late = [p.value for p in ps if p.t_s >= 3 * span / 4] or [ps[-1].value]
        out.append(Growth(name, statistics.median(early), statistics.median(late), max(p.value for p in ps)))
    return out


def spreads(points: list[Point], kind: str) -> list[Spread]:
    """p50, p99 and max of each series of a kind (``loop`` or ``lag``)."""
    out = []
    for name, ps in sorted(_series(points, kind).items()):
        values = sorted(p.value for p in ps)
        out.append(Spread(name, quantile(values, 0.5), quantile(values, 0.99), values[-1]))
    return out
