"""Is a learning curve's rise more than its noise? Pure: a permutation test on the mean reward per step.

``learn``'s goal compares the mean of the last few GRPO steps with that of the first few. A step's mean
over a handful of correlated episodes moves by ±0.3 from one step to the next, so a difference of 0.2
between two 3-step windows can come from the order of the steps alone. The test says how often: shuffle
the steps (a policy that never changed would give every order alike) and count the orders whose rise,
or least-squares slope, is at least the curve's own. A small share means the order mattered.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise

SHUFFLES = 5000
"""Orders drawn per test: a p of 0.05 is then known to about ±0.006; 45 steps take ~0.3 s."""


@dataclass(frozen=True)
class Trend:
    rise: float
    """Mean of the last ``window`` steps less the mean of the first ``window``."""
    p_rise: float
    """Share of shuffled step orders that rise at least as much (the observed order counted once)."""
    slope: float
    """Least-squares change of the step mean per step."""
    p_slope: float
    """Share of shuffled step orders whose slope is at least as steep."""
    thirds: tuple[float, ...]
    """The mean of each third of the steps (first, middle, last): a climb or a step."""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def rise(values: Sequence[float], window: int) -> float:
    return statistics.fmean(values[-window:]) - statistics.fmean(values[:window])


def slope(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    x_mean, y_mean = (n - 1) / 2, statistics.fmean(values)
    spread = sum((i - x_mean) ** 2 for i in range(n))
    return sum((i - x_mean) * (y - y_mean) for i, y in enumerate(values)) / spread


def thirds(values: Sequence[float]) -> tuple[float, ...]:
    n = len(values)
    if n < 3:
        return ()
    cuts = [0, round(n / 3), round(2 * n / 3), n]
    return tuple(statistics.fmean(values[a:b]) for a, b in pairwise(cuts))


def trend(values: Sequence[float], window: int, shuffles: int = SHUFFLES, seed: int = 0) -> Trend | None:
    """The curve's rise and slope and how often a shuffled order matches them; None for under 2 steps."""
    if len(values) < 2:
        return None
    window = min(window, len(values))
    observed_rise, observed_slope = rise(values, window), slope(values)
    tolerance = 1e-12  # float sums of the same values in another order differ in the last bits
    rng, order = random.Random(seed), list(values)
    as_high_rise = as_high_slope = 0
    for _ in range(shuffles):
        rng.shuffle(order)
        as_high_rise += rise(order, window) >= observed_rise - tolerance
        as_high_slope += slope(order) >= observed_slope - tolerance
    return Trend(
        rise=observed_rise,
        p_rise=(as_high_rise + 1) / (shuffles + 1),
        slope=observed_slope,
        p_slope=(as_high_slope + 1) / (shuffles + 1),
        thirds=thirds(values),
    )


def trend_text(t: Trend, window: int) -> str:
    thirds_text = " / ".join(f"{v:.2f}" for v in t.thirds)
    return (
        f"a shuffled order of the same steps rises as much p={t.p_rise:.2f}; slope {t.slope * 10:+.3f} per 10 "
        f"steps (p={t.p_slope:.2f}); thirds {thirds_text or '-'} (first {window} -> last {window} counts as "
        f"a climb only where p is small)"
    )
