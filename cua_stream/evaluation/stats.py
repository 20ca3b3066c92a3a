"""The statistics of an evaluation. Pure: episodes in, numbers out.

**Success.** An episode succeeds when it is scored and its reward reaches ``success_at`` (1.0: the
bundled tasks' verifiers give 0 or 1). Rates are over the *scored* episodes: a discarded episode (the
sandbox lost, the server draining) is not the policy's doing, and an unscored one has no verdict; both
are counted and shown, never silently a failure.

**Intervals.** A success rate carries its 95 % Wilson score interval: unlike the normal approximation it
stays inside [0, 1] and keeps its coverage at the small counts and the rates near 0 or 1 an evaluation
of a few episodes per task has (0/10 is [0, 0.28], not [0, 0]). The episodes of one layout are not
independent draws of the task set, so with several samples per layout the interval is narrower than
the truth; with one sample per layout it is exact to its assumptions.

**pass@k.** The unbiased estimator of the chance that at least one of k samples of a task instance (task
and layout) succeeds, from n samples of which c succeeded: ``1 - C(n-c, k) / C(n, k)``, computed as a
product (no factorials), averaged over the instances with at least k scored samples.

**Comparing two runs.** The difference of success rates (B minus A) with Newcombe's hybrid score
interval (his method 10, built from the two Wilson intervals); the difference is significant when its
interval excludes 0. Unpaired on purpose: two runs need not share layouts or sample counts, and a
scripted or greedy policy's samples of one layout are copies, so a paired test's variance would be
degenerate. Where both runs did share layouts the pairing would only tighten the interval: unpaired is
the conservative choice.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cua_stream.evaluation.results import EvalEpisode

Z95 = 1.959963984540054
"""The standard normal's 97.5th percentile: two-sided 95 %."""
OVERALL = "overall"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes(self, value: float) -> bool:
        return value < self.low or value > self.high


def wilson(successes: int, n: int, z: float = Z95) -> Interval:
    """The Wilson score interval of ``successes`` out of ``n`` (all of [0, 1] when ``n`` is 0)."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes} of {n}")
    if n == 0:
        return Interval(0.0, 1.0)
    p = successes / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z / scale * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # the ends are exact where the count is: rounding must not put 0/n above 0 or n/n below 1
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(low, high)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k from ``n`` samples with ``c`` successes: ``1 - C(n-c, k) / C(n, k)``."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0  # every draw of k samples holds a success
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def difference(a: tuple[int, int], b: tuple[int, int], z: float = Z95) -> Interval:
    """Newcombe's hybrid score interval for the difference of two rates, B minus A, each given as
    (successes, n)."""
    (ca, na), (cb, nb) = a, b
    pa, pb = ca / na, cb / nb
    wa, wb = wilson(ca, na, z), wilson(cb, nb, z)
    d = pb - pa
    low = d - math.hypot(pb - wb.low, wa.high - pa)
    high = d + math.hypot(wb.high - pb, pa - wa.low)
    return Interval(max(-1.0, low), min(1.0, high))


@dataclass(frozen=True)
class Summary:
    """One task's (or the whole run's) episodes, summed up."""

    episodes: int
    scored: int
    successes: int
    interval: Interval
    pass_at: dict[int, float]
    """pass@k for each k up to the samples per instance (instances with fewer scored samples left out)."""
    mean_reward: float | None
    verdicts: dict[str, int]
    """Scored episodes by the scorer's reason (``ok``, ``token_cap``, ...)."""
    discards: dict[str, int]
    unscored: int
    mean_turns: float | None
    mean_seconds: float | None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.scored if self.scored else None


def summarize(episodes: Sequence[EvalEpisode], success_at: float = 1.0) -> Summary:
    scored = [e for e in episodes if e.verdict == "reward"]
    wins = [e for e in scored if succeeded(e, success_at)]
    return Summary(
        episodes=len(episodes),
        scored=len(scored),
        successes=len(wins),
        interval=wilson(len(wins), len(scored)),
        pass_at=_pass_at(scored, success_at),
        mean_reward=_mean(e.reward for e in scored),
        verdicts=dict(sorted(Counter(e.reason for e in scored).items())),
        discards=dict(sorted(Counter(e.reason for e in episodes if e.verdict == "discard").items())),
        unscored=sum(e.verdict == "unscored" for e in episodes),
        mean_turns=_mean(e.turns for e in scored),
        mean_seconds=_mean(e.seconds for e in episodes),
    )


def by_task(episodes: Sequence[EvalEpisode], success_at: float = 1.0) -> dict[str, Summary]:
    """Each task's summary (in first-seen order), then the run's under ``OVERALL``."""
    tasks: dict[str, list[EvalEpisode]] = {}
    for e in episodes:
        tasks.setdefault(e.task, []).append(e)
    out = {task: summarize(eps, success_at) for task, eps in tasks.items()}
    out[OVERALL] = summarize(episodes, success_at)
    return out


def succeeded(episode: EvalEpisode, success_at: float = 1.0) -> bool:
    return episode.verdict == "reward" and episode.reward is not None and episode.reward >= success_at


def _pass_at(scored: Sequence[EvalEpisode], success_at: float) -> dict[int, float]:
    instances: dict[tuple[str, int], list[bool]] = {}
    for e in scored:
        instances.setdefault((e.task, e.seed), []).append(succeeded(e, success_at))
    most = max((len(v) for v in instances.values()), default=0)
    return {
        k: statistics.fmean(pass_at_k(len(v), sum(v), k) for v in instances.values() if len(v) >= k)
        for k in range(1, most + 1)
    }


def _mean(values: Iterable[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


@dataclass(frozen=True)
class Difference:
    """Run B against run A on one task (or overall)."""

    a: Summary
    b: Summary
    delta: float | None = None
    """B's success rate minus A's; None when either has no scored episode."""
    interval: Interval | None = None
    significant: bool = field(default=False)


def compare(
    a: Sequence[EvalEpisode], b: Sequence[EvalEpisode], success_at: float = 1.0
) -> dict[str, Difference]:
    """Per task both runs evaluated, then ``OVERALL`` (over the tasks they share: a task only one run
    has would make the overall rates incomparable)."""
    shared = {e.task for e in a} & {e.task for e in b}
    a_tasks = by_task([e for e in a if e.task in shared], success_at)
    b_tasks = by_task([e for e in b if e.task in shared], success_at)
    return {task: _difference(a_tasks[task], b_tasks[task]) for task in a_tasks if task in b_tasks}


def _difference(a: Summary, b: Summary) -> Difference:
    if not (a.scored and b.scored):
        return Difference(a, b)
    interval = difference((a.successes, a.scored), (b.successes, b.scored))
    delta = b.successes / b.scored - a.successes / a.scored
    return Difference(a, b, delta, interval, interval.excludes(0.0))
