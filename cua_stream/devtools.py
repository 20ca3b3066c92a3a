"""A headless Chromium driven over the DevTools protocol, for programs that read a live page's DOM (the
MiniWoB++ teacher's shadow pages; tests). One browser process, one websocket to its browser target, and
tabs attached to it as flat sessions (each command names its tab's session), so many pages share one
process and one connection.

The browser picks its own debugging port (``--remote-debugging-port=0``) and writes it, with the browser
target's path, to ``DevToolsActivePort`` in its profile: no port is guessed, so two browsers never race
for one. The local desktop's Chromium (installed by the setup) is the browser.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import websockets

from cua_stream.errors import BrowserError

START_TIMEOUT_S = 60.0
"""Time for the browser to write its port (a loaded 2-core machine once took 20 s)."""
CALL_TIMEOUT_S = 60.0
MAX_MESSAGE = 64 * 2**20


class Browser:
    """A headless Chromium's browser target: ``call`` sends a command (to a tab with ``session``) and
    returns its result; a reader task routes each reply to its caller by id."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._closed: str | None = None

    async def read(self) -> None:
        """Route replies until the connection ends (then every waiting call fails)."""
        try:
            async for raw in self._ws:
                reply = json.loads(raw)
                waiter = self._waiting.pop(reply.get("id", -1), None)
                if waiter is not None:
                    waiter[1].append(reply)
                    waiter[0].set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self._closed = "the browser's DevTools connection closed"
            for event, _ in self._waiting.values():
                event.set()

    async def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        if self._closed:
            raise BrowserError(self._closed)
        n = next(self._ids)
        done, box = anyio.Event(), []
        self._waiting[n] = (done, box)
        message: dict[str, Any] = {"id": n, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        try:
            await self._ws.send(json.dumps(message))
            with anyio.fail_after(CALL_TIMEOUT_S):
                await done.wait()
        finally:
            self._waiting.pop(n, None)
        if not box:
            raise BrowserError(f"{method}: {self._closed}")
        if "error" in box[0]:
            raise BrowserError(f"{method}: {box[0]['error']}")
        return box[0].get("result", {})

    async def new_tab(self, url: str = "about:blank") -> Tab:
        target = (await self.call("Target.createTarget", url=url))["targetId"]
        session = (await self.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        tab = Tab(self, target, session)
        await tab.call("Page.enable")
        return tab


class Tab:
    """One page of the browser (a flat session of its connection)."""

    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.browser, self.target, self.session = browser, target, session

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.call(method, self.session, **params)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def navigate(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def close(self) -> None:
        with contextlib.suppress(BrowserError):
            await self.browser.call("Target.closeTarget", targetId=self.target)


def executable() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise BrowserError("no Chromium on PATH: the setup installs it (scripts/setup.sh)")
    return exe


@asynccontextmanager
async def headless_chromium(size: tuple[int, int] = (800, 600)) -> AsyncIterator[Browser]:
    """A headless Chromium (its own profile, removed after), its tabs ``size`` CSS pixels."""
    profile = Path(tempfile.mkdtemp(prefix="cua-chromium-"))
    # the browser dies with the process that started it, even killed outright (its parent-death signal):
    # in a session of its own, it would outlive a policy server killed with SIGKILL
    die = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
    cmd = [*die, executable(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--hide-scrollbars", "--remote-debugging-port=0", f"--user-data-dir={profile}",
           f"--window-size={size[0]},{size[1]}", "about:blank"]  # fmt: skip
    proc = await anyio.open_process(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        url = await _browser_url(profile, proc)
        async with websockets.connect(url, max_size=MAX_MESSAGE) as ws, anyio.create_task_group() as tg:
            browser = Browser(ws)
            tg.start_soon(browser.read)
            try:
                yield browser
            finally:
                tg.cancel_scope.cancel()
    finally:
        # The whole group: Chromium's renderers and helpers outlive a killed browser process for a moment
        # and keep writing to the profile (an rmtree of it once failed with "Directory not empty").
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await proc.wait()
            await _remove(profile)


async def _browser_url(profile: Path, proc: anyio.abc.Process) -> str:
    """The browser target's websocket URL, once Chromium has written its port (BrowserError if it exits
    or takes longer than ``START_TIMEOUT_S``)."""
    active = profile / "DevToolsActivePort"
    with anyio.move_on_after(START_TIMEOUT_S):
        while True:
            lines = active.read_text().split("\n") if active.is_file() else []
            if len(lines) >= 2 and lines[0].strip().isdigit() and lines[1].startswith("/"):
                return f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
            if proc.returncode is not None:
                raise BrowserError(f"Chromium exited at start (status {proc.returncode})")
            await anyio.sleep(0.05)
    raise BrowserError(f"Chromium did not open its DevTools port within {START_TIMEOUT_S:.0f} s")


async def _remove(path: Path) -> None:
    for _ in range(300):  # a helper the group kill reached may still be exiting (30 s at most)
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            await anyio.sleep(0.1)
    shutil.rmtree(path, ignore_errors=True)
