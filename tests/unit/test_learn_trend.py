"""The permutation test `learn` prints beside its curve: a steady climb is told from a step's noise."""

import random

import pytest

from cua_stream.app.learn.trend import rise, slope, thirds, trend, trend_text


def test_a_steady_climb_is_rare_among_shuffled_orders() -> None:
    climb = [i / 30 for i in range(30)]
    t = trend(climb, window=3)
    assert t is not None
    assert t.rise == pytest.approx((28 - 1) / 30)
    assert t.slope == pytest.approx(1 / 30)
    assert t.p_rise < 0.01 and t.p_slope < 0.01
    assert t.thirds[0] < t.thirds[1] < t.thirds[2]


def test_a_fall_is_no_climb() -> None:
    t = trend([1 - i / 20 for i in range(20)], window=3)
    assert t is not None and t.rise < 0 and t.p_rise > 0.99 and t.p_slope > 0.99


def test_noise_with_a_lucky_end_is_not_called_a_climb() -> None:
    # 8 episodes a step at a fixed success rate of 0.6, no learning; the last steps happen to be high
    rng = random.Random(7)
    noise = [sum(rng.random() < 0.6 for _ in range(8)) / 8 for _ in range(40)]
    lucky = [0.5, 0.5, 0.625, *noise[3:-3], 0.75, 0.75, 0.75]  # +0.208, as seeds 211 and 212
    t = trend(lucky, window=3)
    assert t is not None and t.rise >= 0.2  # the goal's +0.2 met by the letter...
    assert t.p_rise > 0.05  # ...and yet a shuffled order does as well often


def test_the_same_curve_gives_the_same_answer() -> None:
    curve = [0.5, 0.25, 0.75, 0.5, 1.0, 0.625, 0.875, 0.75]
    assert trend(curve, 3, seed=1) == trend(curve, 3, seed=1)


@pytest.mark.parametrize("values", [[], [0.5]])
def test_under_two_steps_there_is_no_trend(values: list[float]) -> None:
    assert trend(values, window=3) is None


def test_a_window_longer_than_the_curve_uses_the_whole_curve() -> None:
    t = trend([0.0, 1.0], window=3)
    assert t is not None and t.rise == 0.0 and t.p_rise == 1.0


def test_the_pieces() -> None:
    assert rise([0, 0, 1, 1], 2) == 1.0
    assert slope([0.0]) == 0.0 and slope([1, 3, 5]) == pytest.approx(2.0)
    assert thirds([0, 0, 1, 1, 2, 2]) == (0.0, 1.0, 2.0)
    assert thirds([1, 2]) == ()
    text = trend_text(trend([0.0, 0.0, 0.5, 0.5, 1.0, 1.0], 1) or pytest.fail("no trend"), 1)
    assert "p=" in text and "thirds 0.00 / 0.50 / 1.00" in text
