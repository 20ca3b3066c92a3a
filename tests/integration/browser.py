"""A real headless Chromium driven over the DevTools protocol (``cua_stream.devtools``, the MiniWoB++
teacher's browser): open a page, read its live DOM while it runs, take a screenshot. The local desktop's
Chromium (installed by the setup) is the browser."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from cua_stream.devtools import Tab, headless_chromium
from tests.conftest import wait_until


class Page(Tab):
    """A tab, with what tests read of it."""

    async def html(self) -> str:
        result = await self.call("Runtime.evaluate", expression="document.documentElement.outerHTML",
                                 returnByValue=True)  # fmt: skip
        return result["result"].get("value", "")  # nothing while the page is still navigating

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
    async with headless_chromium(size) as browser:
        tab = await browser.new_tab()
        page = Page(browser, tab.target, tab.session)
        await page.navigate(url)
        yield page
