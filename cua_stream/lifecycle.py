"""Daemon lifecycle helpers shared by every ``serve``: stop on SIGTERM/SIGINT, relay readiness."""

from __future__ import annotations

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
