"""The trainer-join benchmark's curve helpers (``bench/trainer_join.py``): the offered load's schedule and
the knee of a curve of joined against offered turn events/s."""

from __future__ import annotations

import pytest

from bench.trainer_join import KEEP_UP, knee, wait_s


def test_the_schedule_waits_until_the_next_event_is_due_and_never_when_behind() -> None:
    assert wait_s(1000.0, 0, 0.0) == 0.0  # the first event goes at once
    assert wait_s(1000.0, 500, 0.25) == pytest.approx(0.25)  # 500 are due at 0.5 s
    assert wait_s(1000.0, 500, 0.5) == 0.0
    assert wait_s(1000.0, 500, 2.0) == 0.0  # behind the schedule: no wait, it catches up
    with pytest.raises(ValueError):
        wait_s(0.0, 1, 1.0)


def test_the_knee_is_the_lowest_offered_rate_joined_below_the_keep_up_share() -> None:
    points = [(500.0, 499.0), (1000.0, 998.0), (2000.0, 1904.0), (4000.0, 2629.0), (8000.0, 2444.0)]
    assert knee(points) == 4000.0
    assert knee(points[:3]) is None  # 1904 of 2000 is above 90 %
    assert knee([(1000.0, 1000.0 * KEEP_UP - 1)]) == 1000.0
    assert knee([(1000.0, 1000.0 * KEEP_UP)]) is None
    assert knee([(4000.0, 100.0), (2000.0, 100.0)]) == 2000.0  # lowest, whatever the order
    assert knee([]) is None
