"""The supervised processes of a chaos run: each daemon is its own ``cua-stream`` process (so a SIGKILL
is a real crash and a SIGSTOP a real freeze), restarted with the same command, its output appended to
one log per daemon across restarts."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio
import httpx

from cua_stream.config import child_env

READY_TIMEOUT_S = 240.0
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]
"""util-linux's setpriv asks the kernel to SIGKILL the daemon when the chaos run dies, however it dies
(a chaos run killed by its user leaves no daemon behind); the setting survives the exec."""


class Daemon:
    def __init__(
        self, name: str, args: list[str], ready_url: str, log: Path, metrics_url: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.name, self.args, self.ready_url, self.log = name, args, ready_url, log
        self.env = dict(env or {})
        """Set on top of this process's environment (a secured run: the daemon's principal)."""
        self.metrics_url = metrics_url or (ready_url if ready_url.endswith("/metrics") else "")
        """Its Prometheus page (with its event loop's lag), if it has one."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = anyio.Lock()
        """Held while a fault is applied, and until the daemon is ready again: one fault at a time each."""
        self.held = False
        """Down or paused on purpose (the watchdog leaves it alone)."""
        self.starts = 0
        self.crashes: list[int] = []
        """Exit codes of exits nobody asked for (the watchdog restarted it)."""

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"\n===== chaos: start #{self.starts + 1} of {self.name} =====\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [*DIE_WITH_PARENT, sys.executable, "-m", "cua_stream", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(**self.env),
            )
        self.starts += 1

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    async def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.proc is not None:
            self.signal(signal.SIGCONT)  # a paused process dies just the same; no zombie left stopped
            self.signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(self.proc.wait)

    async def ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Wait until its health/metrics URL answers; False if it exited first or the time ran out."""
        with anyio.move_on_after(timeout_s):
            async with httpx.AsyncClient(timeout=2) as http:
                while self.exited() is None:
                    try:
                        if (await http.get(self.ready_url)).status_code == 200:
                            return True
                    except httpx.HTTPError:
                        pass
                    await anyio.sleep(0.25)
        return False

    async def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (SIGCONT first), then SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        proc = self.proc
        with anyio.move_on_after(timeout_s):
            await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)
        if proc.poll() is None:
            await self.kill()
