"""The gateway's drain gate: chat calls in flight counted, new ones held or refused while a weight
update drains the gateway.

``drain`` stops admitting calls and waits (bounded) until none is in flight; ``resume`` opens the gate
again. A call arriving while the gate is closed waits up to ``hold_s`` for the resume (the update is
usually seconds), then is refused with 503 ``draining`` so its agent retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from cua_stream.gateway.refusal import Refusal


class DrainGate:
    def __init__(self, hold_s: float = 0.0) -> None:
        self.hold_s = hold_s
        self.draining = False
        self.in_flight = 0
        self._idle = anyio.Event()  # set whenever no call is in flight
        self._idle.set()
        self._resumed = anyio.Event()

    async def admit(self) -> None:
        """Return when a call may go on; Refusal(503) if the gateway is still draining after the hold."""
        if self.draining and self.hold_s > 0:
            with anyio.move_on_after(self.hold_s):
                await self._resumed.wait()
        if self.draining:
            raise Refusal(503, "the gateway is draining for a weight update; retry shortly", code="draining")

    @contextmanager
    def in_flight_call(self) -> Iterator[None]:
        """Count a call as in flight for the block (a drain waits for it)."""
        self.in_flight += 1
        if self._idle.is_set():
            self._idle = anyio.Event()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        """Stop admitting calls and wait up to ``timeout_s`` for those in flight to finish. Concurrent
        drains wait on the same idle event, so each returns as soon as the gateway is idle."""
        if not self.draining:
            self.draining = True
            self._resumed = anyio.Event()
        with anyio.move_on_after(timeout_s):
            await self._idle.wait()
        return self.status()

    def resume(self) -> dict[str, Any]:
        self.draining = False
        self._resumed.set()
        return self.status()

    def status(self) -> dict[str, Any]:
        return {"draining": self.draining, "in_flight": self.in_flight, "idle": self.in_flight == 0}
