"""The reference engine's scheduler: every request in flight advances one token per round, in turn.

One worker thread owns the model (a CPU forward already uses every core). Requests join a FIFO queue; up
to ``max_running`` are active at once, and each round gives every active request one step (its prefill,
then one token each). So a generation that runs to the context limit cannot starve a short one queued
behind it: the short one finishes after about ``its length × active requests`` steps, whatever the long
one does. Requests are interleaved, not packed into one batched forward: on two CPU cores the tiny
model's steps are dominated by per-call overhead, and SGLang does the batching in production.

Cancellation reaches a request between two of its steps: ``abort(rid)`` (SGLang's ``/abort_request``;
the HTTP layer also calls it when the client disconnects or its deadline passes) and an abort-mode pause
end it with ``finish_reason: abort``. An in-place pause freezes every request between steps (a weight
swap lands there, and the requests report two version spans).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass

from cua_stream.engine.runner import Generation, Job, ModelRunner

log = logging.getLogger(__name__)

_POLL_S = 0.05
"""How often an idle or paused scheduler looks for new work or cancellations."""


@dataclass
class Ticket:
    """A submitted job and where its result goes (an asyncio future of the submitting loop)."""

    job: Job
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Generation]


class Scheduler:
    def __init__(self, runner: ModelRunner, *, max_running: int = 16, step_latency_s: float = 0.0) -> None:
        self.runner = runner
        self.max_running = max_running
        self.step_latency_s = step_latency_s
        """Each round lasts at least this long (benchmarks: a GPU's batched step, whatever the batch)."""
        self.busy_s = 0.0
        """Seconds spent in rounds that advanced a request (benchmarks read it: the engine's busy time)."""
        self.slot_s = 0.0
        """Those rounds' seconds times the requests each advanced (/ ``busy_s``: the mean batch)."""
        self._incoming: queue.SimpleQueue[Ticket] = queue.SimpleQueue()
        self._waiting: deque[Ticket] = deque()
        self._active: list[Ticket] = []
        self._jobs: dict[str, Job] = {}  # rid → job, for abort()
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self.steps = 0
        self.error: BaseException | None = None
        """Set if the scheduler thread itself died (the engine then reports unhealthy)."""
        self._thread = threading.Thread(target=self._run, name="engine-scheduler", daemon=True)
        self._thread.start()

    # -- called from the event loop -----------------------------------------------------------------------

    def submit(self, job: Job) -> asyncio.Future[Generation]:
        """Queue ``job``; the future resolves with its generation. ValueError if its rid is in flight."""
        loop = asyncio.get_running_loop()
        ticket = Ticket(job, loop, loop.create_future())
        with self._lock:
            if job.rid in self._jobs:
                raise ValueError(f"rid {job.rid!r} is already in flight")
            self._jobs[job.rid] = job
            self._idle.clear()
        self._incoming.put(ticket)
        return ticket.future

    def abort(self, rid: str, why: str) -> bool:
        """Cancel the request ``rid`` at its next step (or before it starts). False if unknown."""
        with self._lock:
            job = self._jobs.get(rid)
        if job is None:
            return False
        job.cancelled = job.cancelled or why
        return True

    def abort_all(self, why: str) -> int:
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.cancelled = job.cancelled or why
        return len(jobs)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    @property
    def load(self) -> tuple[int, int]:
        """(running, waiting) requests."""
        return len(self._active), len(self._waiting) + self._incoming.qsize()

    def wait_idle(self) -> None:
        """Block until no request is queued or running (callers stop submitting first)."""
        self._idle.wait()

    def close(self) -> None:
        self._closed = True
        self.abort_all("the engine is shutting down")
        self._thread.join(timeout=10)

    # -- the scheduler thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closed:
                self._take_incoming(block=not self._active and not self._waiting)
                self._admit()
                if not self._active:
                    continue
                if self.runner.gate.paused:
                    self._end_aborted()  # abort_request and abort-mode pauses still end requests
                    self.runner.gate.wait_running(_POLL_S)
                    continue
                self._round()
        except BaseException as e:  # pragma: no cover - a bug in the loop itself: fail every request
            self.error = e
            log.exception("the engine scheduler died")
            for ticket in [*self._active, *self._waiting]:
                self._finish(ticket, error=e)

    def _take_incoming(self, *, block: bool) -> None:
        try:
            ticket = self._incoming.get(timeout=_POLL_S) if block else self._incoming.get_nowait()
        except queue.Empty:
            return
        self._waiting.append(ticket)
        while True:
            try:
                self._waiting.append(self._incoming.get_nowait())
            except queue.Empty:
                return

    def _admit(self) -> None:
        while self._waiting and len(self._active) < self.max_running:
            self._active.append(self._waiting.popleft())
        for ticket in [t for t in self._waiting if t.job.cancelled]:  # cancelled while queued
            self._waiting.remove(ticket)
            self.runner.aborted(ticket.job)
            self._finish(ticket)

    def _round(self) -> None:
        """One step of every active request, in admission order (at least ``step_latency_s`` long)."""
        started = time.perf_counter()
        advanced = self._advance_each()
        if advanced:
            if (rest := self.step_latency_s - (time.perf_counter() - started)) > 0:
                time.sleep(rest)
            took = time.perf_counter() - started
            self.busy_s += took
            self.slot_s += took * advanced

    def _advance_each(self) -> int:
        """Advance every active request by one step (until a pause); how many were advanced."""
        advanced = 0
        for ticket in list(self._active):
            if self.runner.gate.paused:
                break
            job = ticket.job
            if self.runner.aborted(job):
                self._finish(ticket)
                continue
            try:
                finished = self.runner.advance(job)
            except Exception as e:  # one request's failure (e.g. a torch error) fails that request only
                log.exception("request %s failed", job.rid)
                self._finish(ticket, error=e)
                continue
            self.steps += 1
            advanced += 1
            if finished:
                self._finish(ticket)
        return advanced

    def _end_aborted(self) -> None:
        for ticket in list(self._active):
            if self.runner.aborted(ticket.job):
                self._finish(ticket)

    def _finish(self, ticket: Ticket, *, error: BaseException | None = None) -> None:
        if ticket in self._active:
            self._active.remove(ticket)
        ticket.job.cache = ticket.job.logits = None  # free the KV cache now, not when the future is read
        with self._lock:
            self._jobs.pop(ticket.job.rid, None)
            if not self._jobs:
                self._idle.set()
        ticket.loop.call_soon_threadsafe(_resolve, ticket.future, ticket.job.gen, error)


def _resolve(future: asyncio.Future[Generation], gen: Generation, error: BaseException | None) -> None:
    if future.done():  # the waiter was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(gen)
