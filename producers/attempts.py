"""Attempt numbers: each run of a work request gets its own. Pure (the clock is passed in).

A run's number is its start time in milliseconds since the epoch, made strictly increasing within the
producer. Why not 0, 1, 2, ...: counting runs durably would need a read of every earlier attempt before
each start (a topic scan or a store); a clock needs nothing, and a later run still gets a larger number
(producers' clocks agree to far better than the seconds between a crash and a re-delivery). Two runs of
one request in the same millisecond would need two producers to hold the same work at once, which the
consumer group rules out outside a rebalance.
"""

from __future__ import annotations


class AttemptClock:
    def __init__(self) -> None:
        self._last = 0

    def next(self, now_s: float) -> int:
        """The attempt number for a run starting at ``now_s`` (seconds since the epoch)."""
        self._last = max(self._last + 1, int(now_s * 1000))
        return self._last
