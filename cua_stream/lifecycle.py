"""Daemon lifecycle helpers shared by every ``serve``: stop on SIGTERM/SIGINT, relay readiness."""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus

log = logging.getLogger(__name__)


async def stop_on_signal(stop: anyio.Event, what: str) -> None:
    """Set ``stop`` at the first SIGTERM or SIGINT (a second one, once this returned, kills the process
    the default way)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: %s, stopping after the work in hand", what, signal.Signals(signum).name)
            stop.set()
            return


def freeze_startup_heap() -> int:
    """Collect, then move every object alive now out of the cyclic garbage collector's sight; returns how
    many. Called once a daemon is ready (imports, model and clients loaded), from its ``serve``.

    Why: a full (generation 2) collection walks every tracked object, and a daemon that imports torch holds
    ~200k of them at start, nearly all alive for the life of the process: each full collection then stalls
    the event loop ~100 ms on a busy 2-core machine, and decoding events allocates enough to trigger one
    every few hundred milliseconds (``bench/event_path.py``: 2 per backlog round, 0.3–0.45 s of the round's
    1 s of CPU). Frozen, they are skipped; reference counting still frees them as before, only a frozen
    object that later ends up in a reference cycle is never collected (the startup heap lives as long as
    the process anyway). Called from ``serve`` only, not ``run``: a test process running many daemons
    would otherwise freeze its fixtures' cycles for good.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class Notify(TaskStatus[None]):
    """A TaskStatus that calls ``fn`` when started (relays readiness with a value attached)."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self._fn = fn

    def started(self, value: None = None) -> None:
        self._fn()


async def stop_then_abandon(stop: anyio.Event, abandon: anyio.Event, what: str) -> None:
    """First SIGTERM/SIGINT sets ``stop`` (finish the work in hand), the second sets ``abandon`` (cancel it,
    saying so), a third kills the process the default way."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            if not stop.is_set():
                log.info("%s: %s, draining: no new work, finishing the episodes in hand", what, name)
                stop.set()
            else:
                log.warning("%s: second %s, abandoning the episodes in hand", what, name)
                abandon.set()
                return
