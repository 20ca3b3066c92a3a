"""Shadow pages: the teacher's own copy of an episode's page, where it reads the DOM the episode's agent
never sees.

A shadow is the episode's wrapper page at the episode's seed (``site.Episode``, served by an in-process
page server on loopback), loaded in a tab of one headless Chromium (``cua_stream.devtools``). MiniWoB++'s
``genProblem`` draws from ``Math.seedrandom("<task>:<seed>")``, so the shadow shows the episode's problem
(docs/miniwob.md, determinism). The teacher's moves are applied to it through DevTools input events at
the wrapper's geometry, the same events computer-1's xdotool makes on the desktop, so after the teacher's
``k``-th move the shadow is where the episode is.

``Shadows`` keeps a few of them, each with the number of moves applied: an episode's next request finds
its shadow one move behind, and a shadow is rebuilt (loaded again and the moves replayed) only when none
is behind the request. The browser is started on first use, by ``run`` (a task of the server's
lifespan: the browser's reader lives in that task's scope, not a request's).
"""

from __future__ import annotations

import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from cua_stream.devtools import Browser, Tab, headless_chromium
from cua_stream.errors import BrowserError
from cua_stream.tasks.miniwob.dom import Snapshot, parse, snapshot_script
from cua_stream.tasks.miniwob.moves import Move, key_events
from cua_stream.tasks.miniwob.package import installed
from cua_stream.tasks.miniwob.site import Episode, handler
from cua_stream.tasks.miniwob.solvers import History, Solver
from cua_stream.tasks.miniwob.wrapper import ZOOM

MAX_SHADOWS = 6
"""Shadow pages kept at once (each a tab and a page server); the least recently used idle one goes."""
LOAD_TIMEOUT_S = 60.0
SETTLE_POLL_S = 0.1
SETTLE_MAX_S = 2.0
"""After a move, the DOM is read again until two reads agree (animations end), for this long at most."""


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a shadow's tab closed mid-response (a broken pipe) is no error of the page's."""


class Shadow:
    """One shadow page and the moves applied to it."""

    def __init__(self, name: str, seed: int, tab: Tab, episode: Episode, server: ThreadingHTTPServer) -> None:
        self.name, self.seed, self.tab = name, seed, tab
        self.episode, self.server = episode, server
        self.history: list[Move] = []
        self.frame = (0.0, 0.0)
        self.used = time.monotonic()

    @classmethod
    async def open(cls, browser: Browser, name: str, seed: int) -> Shadow:
        episode = Episode(name, seed, installed().html)
        server = _Server(("127.0.0.1", 0), handler(episode))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            tab = await browser.new_tab()
        except BaseException:
            _stop(server)
            raise
        shadow = cls(name, seed, tab, episode, server)
        try:
            await tab.navigate(f"http://127.0.0.1:{server.server_port}/")
            # a worker thread waits on the page server's event (set by the page's POST /painted)
            if not await anyio.to_thread.run_sync(episode.state.painted.wait, LOAD_TIMEOUT_S):
                raise BrowserError(f"the shadow page of {name} was not painted in {LOAD_TIMEOUT_S:.0f} s")
        except BaseException:
            await shadow.close()
            raise
        painted = next(e["painted"] for e in episode.state.snapshot() if "painted" in e)
        shadow.frame = (float(painted["frame"][0]), float(painted["frame"][1]))
        return shadow

    @property
    def applied(self) -> int:
        return len(self.history)

    async def snapshot(self, extra: str | None = None, hit: int = -1) -> Snapshot:
        """The page's DOM once it is still (two reads ``SETTLE_POLL_S`` apart agree, or ``SETTLE_MAX_S``),
        with ``extra`` read in the task's window (and, given ``hit``, where a click reaches element
        ``hit``)."""
        script = snapshot_script(extra, hit)
        last = await self.tab.evaluate(script)
        deadline = time.monotonic() + SETTLE_MAX_S
        while time.monotonic() < deadline:
            await anyio.sleep(SETTLE_POLL_S)
            now = await self.tab.evaluate(script)
            if now == last:
                break
            last = now
        if last is None:
            raise BrowserError(f"the shadow page of {self.name} has no task frame")
        return parse(last)

    async def play(self, solver: Solver, moves: int) -> Snapshot:
        """The page once ``solver``'s moves are applied up to ``moves`` in all, or it ended, or the solver
        stopped (each move decided from the page as it is and the moves before it)."""
        snap = await self.snapshot(solver.extra)
        while self.applied < moves and not snap.ended:
            if (move := solver.solve(snap, tuple(self.history))) is None:
                break
            await self.apply(move)
            snap = await self.snapshot(solver.extra)
        return snap

    def viewport(self, x: float, y: float) -> tuple[int, int]:
        """The viewport pixel showing task-page point (x, y), rounded as the desktop's click is."""
        return round(self.frame[0] + ZOOM * x), round(self.frame[1] + ZOOM * y)

    async def apply(self, move: Move) -> None:
        """``move`` through DevTools input, as xdotool does it on the desktop."""
        mouse = self._mouse
        if move.kind in ("click", "hover", "drag"):
            x, y = self.viewport(move.x, move.y)
            await mouse("mouseMoved", x, y)
            if move.kind == "click":
                await mouse("mousePressed", x, y, clickCount=1)
                await mouse("mouseReleased", x, y, clickCount=1)
            elif move.kind == "drag":
                ex, ey = self.viewport(move.end_x, move.end_y)
                await mouse("mousePressed", x, y, clickCount=1)
                await mouse("mouseMoved", ex, ey, buttons=1)
                await mouse("mouseReleased", ex, ey, clickCount=1)
        elif move.kind == "type":
            for ch in move.text:
                await self.tab.call("Input.dispatchKeyEvent", type="keyDown", key=ch, text=ch)
                await self.tab.call("Input.dispatchKeyEvent", type="keyUp", key=ch)
        elif move.kind == "keys":
            for event in key_events(move.keys):
                await self.tab.call("Input.dispatchKeyEvent", **event)
        self.history.append(move)

    async def _mouse(self, kind: str, x: int, y: int, **extra: Any) -> None:
        button = {} if kind == "mouseMoved" and "buttons" not in extra else {"button": "left"}
        await self.tab.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **button, **extra)

    async def close(self) -> None:
        await self.tab.close()
        _stop(self.server)


def _stop(server: ThreadingHTTPServer) -> None:
    threading.Thread(target=lambda: (server.shutdown(), server.server_close()), daemon=True).start()


class Shadows:
    """A few shadow pages (``MAX_SHADOWS``), reused by task, seed and moves applied."""

    def __init__(self) -> None:
        self._wanted = anyio.Event()
        self._ready = anyio.Event()
        self._browser: Browser | None = None
        self._failed: str | None = None
        self._idle: list[Shadow] = []
        self._slots = anyio.Semaphore(MAX_SHADOWS)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Starts the browser when first wanted and holds it until cancelled (the server's lifespan)."""
        task_status.started()
        await self._wanted.wait()
        try:
            async with headless_chromium() as browser:
                self._browser = browser
                self._ready.set()
                await anyio.sleep_forever()
        except BrowserError as e:
            self._failed = str(e)
            self._ready.set()
        finally:
            self._browser = None

    async def _started(self) -> Browser:
        self._wanted.set()
        with anyio.fail_after(LOAD_TIMEOUT_S):
            await self._ready.wait()
        if self._browser is None:
            raise BrowserError(self._failed or "the shadow pages' browser is not running")
        return self._browser

    async def state(self, name: str, seed: int, moves: int, solver: Solver) -> tuple[Snapshot, History]:
        """The page of ``name`` at ``seed`` after the teacher's first ``moves`` moves, and those moves
        (``solver`` decides each one again, from the page and the moves before it: the teacher's moves
        are a function of them), or after fewer when the page ended first or ``solver`` gives up."""
        browser = await self._started()
        async with self._slots:
            shadow = self._take(name, seed, moves) or await Shadow.open(browser, name, seed)
            keep = False
            try:
                snap = await shadow.play(solver, moves)
                keep = True
                return snap, tuple(shadow.history)
            finally:
                if keep:
                    shadow.used = time.monotonic()
                    self._idle.append(shadow)
                    await self._trim()
                else:
                    await shadow.close()

    def _take(self, name: str, seed: int, moves: int) -> Shadow | None:
        """The idle shadow of ``name`` at ``seed`` furthest along but not past ``moves`` (taken out)."""
        fits = [s for s in self._idle if s.name == name and s.seed == seed and s.applied <= moves]
        if not fits:
            return None
        best = max(fits, key=lambda s: s.applied)
        self._idle.remove(best)
        return best

    async def _trim(self) -> None:
        while len(self._idle) > MAX_SHADOWS:
            oldest = min(self._idle, key=lambda s: s.used)
            self._idle.remove(oldest)
            await oldest.close()

    async def aclose(self) -> None:
        while self._idle:
            await self._idle.pop().close()
