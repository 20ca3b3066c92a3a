"""An evaluation's statistics against numbers worked by hand: Wilson intervals, the unbiased pass@k,
Newcombe's interval of a difference (his paper's own example), and the summaries and comparisons the
eval command prints."""

from __future__ import annotations

import itertools
import math

import pytest

from cua_stream.evaluation.results import EvalEpisode, Verdict
from cua_stream.evaluation.stats import OVERALL, by_task, compare, difference, pass_at_k, summarize, wilson


def test_wilson_intervals_match_hand_computations() -> None:
    # z^2 = 3.8415; 0/10: centre = half = (z^2/20) / (1 + z^2/10), so the upper end is z^2 / (10 + z^2)
    assert wilson(0, 10).low == 0.0
    assert (
        wilson(0, 10).high == pytest.approx(3.841459 / 13.841459, abs=1e-6) == pytest.approx(0.2775, abs=1e-4)
    )
    assert (wilson(10, 10).low, wilson(10, 10).high) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert (wilson(7, 10).low, wilson(7, 10).high) == (
        pytest.approx(0.3968, abs=1e-4),
        pytest.approx(0.8922, abs=1e-4),
    )
    assert (wilson(2, 2).low, wilson(4, 4).low) == (
        pytest.approx(0.3424, abs=1e-4),
        pytest.approx(0.5101, abs=1e-4),
    )
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)  # no episode: nothing known
    with pytest.raises(ValueError, match="within 0..n"):
        wilson(3, 2)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    # n=5, c=2: 1 - C(3,k)/C(5,k) = 1 - 3/5, 1 - 3/10, 1 - 1/10, then 1 (every 4 of 5 holds a success)
    assert [pass_at_k(5, 2, k) for k in range(1, 6)] == pytest.approx([0.4, 0.7, 0.9, 1.0, 1.0])
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    for n in range(1, 31):  # the product form agrees with the binomials it avoids
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(
                    1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12
                )
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_newcombes_difference_interval() -> None:
    # Newcombe (1998), example (a): 56/70 against 48/80, method 10: 0.0524 to 0.3339 (here B minus A)
    d = difference((48, 80), (56, 70))
    assert (d.low, d.high) == (pytest.approx(0.0524, abs=1e-4), pytest.approx(0.3339, abs=1e-4))
    # 0/10 -> 10/10: 1 - sqrt(2) * 0.2775 below, 1 above
    d = difference((0, 10), (10, 10))
    assert (d.low, d.high) == (pytest.approx(1 - math.sqrt(2) * 0.27753, abs=1e-4), 1.0)


def ep(
    task: str,
    seed: int,
    reward: float | None,
    reason: str = "ok",
    *,
    verdict: Verdict | None = None,
    turns: int | None = None,
    seconds: float | None = None,
) -> EvalEpisode:
    return EvalEpisode(
        episode_id=f"{task}-s{seed}-e{next(_ids)}", task=task, seed=seed, sample=0,
        verdict=verdict or ("reward" if reward is not None else "unscored"),
        reward=reward, reason=reason, turns=turns, seconds=seconds,
    )  # fmt: skip


_ids = itertools.count()


def test_a_summary_rates_only_scored_episodes_and_counts_the_rest() -> None:
    episodes = [
        ep("a", 1, 1.0, turns=3, seconds=2.0),
        ep("a", 1, 0.0, "token_cap", turns=5, seconds=4.0),
        ep("a", 2, 1.0, turns=4, seconds=3.0),
        ep("a", 2, 0.5, turns=6, seconds=5.0),  # under success_at: scored, not a success
        ep("a", 3, None, "sandbox_lost", verdict="discard", seconds=1.0),
        ep("a", 4, None),  # never scored
    ]
    s = summarize(episodes)
    assert (s.episodes, s.scored, s.successes, s.success_rate) == (6, 4, 2, 0.5)
    assert (s.interval.low, s.interval.high) == (
        pytest.approx(0.1500, abs=1e-4),
        pytest.approx(0.8500, abs=1e-4),
    )
    # instances (a,1) and (a,2) each 1 of 2: pass@1 = 1/2, pass@2 = 1 - C(1,2)/C(2,2) = 1
    assert s.pass_at == {1: 0.5, 2: 1.0}
    assert s.mean_reward == pytest.approx(2.5 / 4)
    assert (s.verdicts, s.discards, s.unscored) == ({"ok": 3, "token_cap": 1}, {"sandbox_lost": 1}, 1)
    assert (s.mean_turns, s.mean_seconds) == (4.5, 3.0)
    assert summarize(episodes, success_at=0.5).successes == 3


def test_per_task_summaries_end_with_the_overall_one() -> None:
    tasks = by_task([ep("b", 1, 1.0), ep("a", 1, 0.0), ep("b", 2, 1.0)])
    assert list(tasks) == ["b", "a", OVERALL]
    assert [(s.successes, s.scored) for s in tasks.values()] == [(2, 2), (0, 1), (2, 3)]
    assert by_task([])[OVERALL].success_rate is None


def test_a_comparison_is_per_shared_task_with_significance() -> None:
    a = [ep("x", s, 0.0) for s in range(10)] + [ep("y", s, 1.0) for s in range(5)] + [ep("only-a", 1, 1.0)]
    b = [ep("x", s, 1.0) for s in range(10)] + [ep("y", s, 1.0) for s in range(5)]
    diffs = compare(a, b)
    assert list(diffs) == ["x", "y", OVERALL]  # a task only one run has is left out, overall too
    assert diffs["x"].delta == 1.0 and diffs["x"].significant
    assert diffs["y"].delta == 0.0 and not diffs["y"].significant
    assert (diffs[OVERALL].a.successes, diffs[OVERALL].a.scored) == (5, 15)
    unscored = compare([ep("x", 1, None)], [ep("x", 1, 1.0)])["x"]
    assert unscored.delta is None and unscored.interval is None and not unscored.significant
