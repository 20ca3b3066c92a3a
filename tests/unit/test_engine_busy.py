"""The engine-busy benchmark's pure parts (``bench/engine_busy.py``): the independent-episodes model of
the engine's busy share and the concurrency it asks for, a turn's generation time by the latency model,
the work a point publishes, the split of a measured turn, and where a sweep first reaches the goal."""

from __future__ import annotations

import random

import pytest

from bench.engine_busy import (
    completion_tokens,
    episodes_for_busy,
    first_crossing,
    generation_s,
    predicted_busy,
    turn_split,
    work_for_point,
)
from bench.fixtures.latency_model import LatencyModel


def test_a_turns_generation_is_one_prefill_then_a_decode_step_per_later_token() -> None:
    model = LatencyModel()
    # 600 new prompt tokens: 4.5 + 19.2 ms; then 239 decode steps of one request at 4.54 ms
    assert generation_s(model, 240, 600) == pytest.approx((4.5 + 0.032 * 600 + 239 * 4.54) / 1e3)
    assert generation_s(model, 240, 600, batch=100) > generation_s(model, 240, 600)


def test_the_busy_share_of_independent_episodes() -> None:
    assert predicted_busy(1, 0.3) == pytest.approx(0.3)
    assert predicted_busy(2, 0.5) == pytest.approx(0.75)  # idle only when both are acting
    assert predicted_busy(0, 0.3) == 0.0
    shares = [predicted_busy(n, 0.28) for n in range(1, 40)]
    assert shares == sorted(shares) and shares[-1] < 1.0
    with pytest.raises(ValueError):
        predicted_busy(4, 1.5)


def test_the_episodes_a_busy_goal_needs_are_the_fewest_that_reach_it() -> None:
    for share in (0.05, 0.28, 0.5, 0.9):
        n = episodes_for_busy(0.9, share)
        assert predicted_busy(n, share) >= 0.9 > predicted_busy(n - 1, share)
    assert (
        episodes_for_busy(0.9, 1.11 / (1.11 + 2.8)) == 7
    )  # the default turn: 1.11 s generating, 2.8 s acting
    assert episodes_for_busy(0.9, 0.28) == 8  # 7 give 0.8997
    assert episodes_for_busy(0.5, 0.5) == 1  # exactly reached
    assert episodes_for_busy(0.9, 1.0) == 1
    with pytest.raises(ValueError):
        episodes_for_busy(1.0, 0.3)


def test_a_point_publishes_enough_work_never_to_starve() -> None:
    assert work_for_point(16, 30.0, 20.0) == 16 * 3  # two episodes' worth a slot, and one to spare
    assert work_for_point(4, 0.0, 20.0) == 4
    assert work_for_point(8, 40.0, 20.0) == 8 * 3
    with pytest.raises(ValueError):
        work_for_point(0, 10.0, 1.0)


def test_reply_lengths_vary_around_the_mean() -> None:
    rng = random.Random(1)
    lengths = [completion_tokens(rng, 240) for _ in range(2000)]
    assert min(lengths) >= 120 and max(lengths) <= 360 and len(set(lengths)) > 100
    assert sum(lengths) / len(lengths) == pytest.approx(240, rel=0.03)
    assert completion_tokens(rng, 1) == 1


def test_a_measured_turn_splits_into_engine_action_and_the_loops_own_time() -> None:
    # 8 episodes for 10 s answered 40 turns: a turn every 2 s each; 36 answered spent 18 s in the engine
    split = turn_split(8, 10.0, 40, 36, 18.0, 1.4)
    assert split.turn_s == pytest.approx(2.0)
    assert split.engine_s == pytest.approx(0.5)
    assert split.loop_s == pytest.approx(2.0 - 0.5 - 1.4)
    assert split.engine_share == pytest.approx(0.25)
    with pytest.raises(ValueError):
        turn_split(8, 10.0, 0, 0, 0.0, 1.4)


def test_the_crossing_is_the_fewest_episodes_at_the_goal_even_if_a_later_point_dips() -> None:
    points = [(1, 0.2), (4, 0.7), (8, 0.88), (16, 0.98), (32, 0.89)]
    assert first_crossing(points, 0.9) == 16
    assert first_crossing(points, 0.99) is None
    assert first_crossing([], 0.9) is None
