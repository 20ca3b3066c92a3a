"""The docs site as a reader sees it: built by mkdocs, served over real HTTP, opened in the real headless
Chromium (``tests/integration/browser.py``): the home page, a tutorial and the CLI reference render, a
click on a navigation link navigates, and Material's search finds a word."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from collections.abc import Iterator

import anyio
import pytest

from cua_stream.errors import BrowserError
from tests.conftest import free_port, wait_until
from tests.integration.browser import Page, chromium
from tests.unit.test_docs import ROOT, mkdocs

pytestmark = [pytest.mark.slow, pytest.mark.desktop(root=False, programs=("chromium",))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The built site's URL, served from a thread of this process."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([mkdocs(), "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # one line per request otherwise
        pass


H1 = "document.readyState === 'complete' && document.querySelector('article h1, h1')?.textContent"


async def shows(page: Page, title: str) -> None:
    """Waits until the page's h1 is ``title``: a click or a navigation lands when it lands, and until then
    the page before it is still shown, complete, with its own h1."""

    async def shown() -> bool:
        try:
            return str(await page.evaluate(H1)).strip(" ¶") == title
        except BrowserError:  # asked while the next document replaces this one
            return False

    try:
        with anyio.fail_after(30):
            await wait_until(shown, poll_s=0.2)
    except TimeoutError:
        raise AssertionError(
            f"the page's h1 is {await page.evaluate(H1)!r} after 30 s, not {title!r}"
        ) from None


async def click(page: Page, selector: str) -> None:
    """A real mouse click (pressed and released) at the middle of the element ``selector`` finds."""
    box = await page.evaluate(
        f"(() => {{ const e = document.querySelector({selector!r}); e.scrollIntoView({{block: 'center'}});"
        " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    for kind in ("mousePressed", "mouseReleased"):
        await page.call(
            "Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1
        )


@pytest.mark.anyio
async def test_the_site_renders_navigates_and_searches(site: str) -> None:
    async with chromium(f"{site}/", size=(1280, 900)) as page:
        await shows(page, "cua-stream")
        await click(page, "nav a[href$='tutorials/harbor-tasks/']")
        await shows(page, "Training on your own Harbor tasks")
        assert str(await page.evaluate("location.pathname")).endswith("/tutorials/harbor-tasks/")

        await page.navigate(f"{site}/reference/cli/")
        await shows(page, "CLI reference")
        assert await page.evaluate("document.querySelectorAll('table').length") > 20

        await click(page, "label.md-search__icon, label[for='__search']")
        await page.evaluate("document.querySelector('.md-search__input').focus()")
        await page.call("Input.insertText", text="tap")

        async def results() -> bool:
            return await page.evaluate("document.querySelectorAll('.md-search-result__item').length") > 0

        with anyio.fail_after(30):
            await wait_until(results, poll_s=0.25)
        found = await page.evaluate("document.querySelector('.md-search-result__list').textContent")
        assert "tap" in found.lower()
