"""A real headless Chromium driven over the DevTools protocol (a websocket): open a page, read its live DOM
while it runs, take a screenshot. The local desktop's Chromium (installed by the setup) is the browser."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import websockets

from tests.conftest import free_port, wait_until


class Page:
    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self.ids)
        await self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == n:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    async def html(self) -> str:
        result = await self.call("Runtime.evaluate", expression="document.documentElement.outerHTML",
                                 returnByValue=True)  # fmt: skip
        return result["result"].get("value", "")  # nothing while the page is still navigating

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def hover(self, x: float, y: float) -> None:
        """Move the mouse to (x, y) in CSS pixels of the viewport, as a user's pointer would."""
        await self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    async def until(self, holds: Callable[[str], bool], timeout_s: float = 30.0) -> str:
        """The page's HTML once ``holds`` is true of it (polled; the page keeps running meanwhile)."""
        html = ""

        async def check() -> bool:
            nonlocal html
            html = await self.html()
            return holds(html)

        with anyio.fail_after(timeout_s):
            await wait_until(check, poll_s=0.25)
        return html

    async def screenshot(self, path: Path) -> None:
        data = (await self.call("Page.captureScreenshot", format="png"))["data"]
        await anyio.Path(path).write_bytes(base64.b64decode(data))


@asynccontextmanager
async def chromium(url: str, size: tuple[int, int] = (1280, 1700)) -> AsyncIterator[Page]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "the local desktop's Chromium is installed by the setup (scripts/setup.sh)"
    port = free_port()
    profile = tempfile.mkdtemp(prefix="cua-chromium-")
    cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
           f"--window-size={size[0]},{size[1]}", "about:blank"]  # fmt: skip
    proc = await anyio.open_process(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        target = await _page_target(port)
        async with websockets.connect(target, max_size=64 * 2**20) as ws:
            page = Page(ws)
            await page.call("Page.enable")
            await page.call("Page.navigate", url=url)
            yield page
    finally:
        # The whole group: Chromium's renderers and helpers outlive a killed browser process for a moment
        # and keep writing to the profile (an rmtree of it once failed with "Directory not empty").
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        await _remove(Path(profile))


async def _remove(path: Path) -> None:
    for _ in range(300):  # a helper the group kill reached may still be exiting (30 s at most)
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            await anyio.sleep(0.1)
    shutil.rmtree(path)


async def _page_target(port: int) -> str:
    async def listed() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=5) as http:
            return (await http.get(f"http://127.0.0.1:{port}/json/list")).json()

    found: list[str] = []

    async def ready() -> bool:
        try:
            found.extend(t["webSocketDebuggerUrl"] for t in await listed() if t.get("type") == "page")
        except httpx.TransportError:  # not listening yet
            return False
        return bool(found)

    with anyio.fail_after(60):
        await wait_until(ready, poll_s=0.2)
    return found[0]
