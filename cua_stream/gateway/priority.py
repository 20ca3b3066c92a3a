"""Engine calls by priority, for an engine that training and evaluation share (an ``eval``-lane producer
fleet pointed at the run's gateway): with a bound on the calls in flight to the engine
(``gateway.engine_max_in_flight``), a waiting training call always goes before a waiting evaluation
call, so an evaluation delays training by at most the calls it already has in flight, never by a queue
of its own. Unbounded (the default) nothing waits here and there is no order: the engine's own
scheduler batches whatever comes.

Whose a call is follows from its session's run id: evaluation runs' ids start with ``eval-``
(``identity.is_eval_run``)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from cua_stream.identity import is_eval_run

TRAINING, EVALUATION = 0, 1
"""Priorities: the lower is served first."""
LANES = {TRAINING: "train", EVALUATION: "eval"}


def priority_of(run_id: str) -> int:
    return EVALUATION if is_eval_run(run_id) else TRAINING


class EngineSlots:
    """At most ``limit`` engine calls at once (None: no bound); a freed slot goes to the waiting call of
    the best priority, first come first served within one. A call arriving while others wait queues
    behind them (by priority) even if a slot is free that instant: the handoff below keeps it so."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"engine_max_in_flight: at least 1 (or none), got {limit}")
        self.limit = limit
        self.in_flight = 0
        self._waiting: list[tuple[int, int, anyio.Event]] = []
        self._order = itertools.count()

    def waiting(self, priority: int) -> int:
        return sum(1 for p, _, _ in self._waiting if p == priority)

    @asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        if self.limit is None or (self.in_flight < self.limit and not self._waiting):
            self.in_flight += 1
        else:
            entry = (priority, next(self._order), anyio.Event())
            heapq.heappush(self._waiting, entry)
            try:
                await entry[2].wait()
            except BaseException:  # cancelled while waiting (the client went away)
                if entry[2].is_set():
                    self._release()  # handed a slot meanwhile: pass it on
                else:
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        if self._waiting:  # the slot passes straight to the best waiter: in_flight is unchanged
            heapq.heappop(self._waiting)[2].set()
        else:
            self.in_flight -= 1
