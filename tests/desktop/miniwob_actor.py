"""A minimal scripted actor for a few MiniWoB++ tasks, for tests: it reads the task's DOM from a shadow
copy of the episode's page (the same wrapper and seed, so the same problem, in a headless Chromium of the
test's own) and acts on the episode through computer-1 only: each reply is computer-1 JSON whose
coordinates are computed from where the screenshot shows the task's frame (its yellow banner's corner)
plus ``ZOOM`` times the element's position in the task page. So a click lands where it should only if
the screenshot, the zoom and xdotool's pixels agree with the DOM.

The same plan is replayed on the shadow page through DevTools input events at the wrapper's own geometry
(``replay``): the reward the page gives there is what the desktop's episode must get.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from cua_stream.config import Secret
from cua_stream.events import OutcomeEvent, TaskRef, WorkRequest
from cua_stream.tasks.miniwob.package import installed
from cua_stream.tasks.miniwob.screen import Frame, frame_on, to_grid
from cua_stream.tasks.miniwob.site import Episode, handler
from cua_stream.tasks.miniwob.wrapper import ZOOM
from cua_stream.tasks.policies import progress, reply_text
from cua_stream.tasks.policy_server import chat_messages, latest_screenshot
from producers.config import ProducerConfig
from producers.episode import EpisodeRun
from producers.trial import TrialRunner
from tests.conftest import free_port, wait_until
from tests.integration.browser import Page
from tests.integration.gateway_servers import serving

PLAN = """(function (task, ZOOM) {
  var f = document.getElementById("task"), d = f.contentDocument, w = f.contentWindow;
  function centre(el) { var r = el.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }
  var submit = d.getElementById("subbtn");
  if (task === "click-test") return [{click: centre(submit)}];
  if (task === "circle-center") return [{click: centre(d.querySelector("circle.black-circle"))}, {click: centre(submit)}];
  if (task === "find-midpoint") {
    var c = d.querySelectorAll("circle.black-circle"), a = centre(c[0]), b = centre(c[1]);
    return [{click: [(a[0] + b[0]) / 2, (a[1] + b[1]) / 2]}, {click: centre(submit)}];
  }
  if (task === "drag-box") {  // the small box's top-left 15 pixels inside the large one's
    var s = d.getElementById("draggableSmall").getBoundingClientRect();
    var l = d.getElementById("draggableLarge").getBoundingClientRect();
    return [{drag: [centre(d.getElementById("draggableSmall")), [l.left + 15 - s.left, l.top + 15 - s.top]]},
            {click: centre(submit)}];
  }
  if (task === "use-slider") {
    // pressed on the track off the handle (jQuery UI then takes the pointer's position as it is, with no
    // offset into the handle), dragged to a pixel where the asked value is. A page's mouse events carry
    // whole task pixels (a zoomed frame's fractions are dropped), so the plan picks whole pixels, and
    // points at their centres (one screen pixel right and below their corner, at ZOOM 2)
    var o = w.$("#slider").slider("option"), n = +d.getElementById("query").textContent.match(/-?\\d+/)[0];
    var t = d.getElementById("slider").getBoundingClientRect(), h = centre(d.querySelector(".ui-slider-handle"));
    var across = o.orientation === "horizontal", size = across ? t.width : t.height;
    var valueAt = function (px) {  // jQuery UI's _normValueFromMouse, for a whole pixel along the track
      var f = Math.min(1, Math.max(0, (px - (across ? t.left : t.top)) / size));
      return Math.round(o.min + (across ? f : 1 - f) * (o.max - o.min));
    };
    var k = (n - o.min) / (o.max - o.min), exact = across ? t.left + k * size : t.top + (1 - k) * size;
    var best = null;
    for (var px = Math.floor(exact) - 3; px <= Math.ceil(exact) + 3; px++) {
      if (valueAt(px) === n && (best === null || Math.abs(px - exact) < Math.abs(best - exact))) best = px;
    }
    if (best === null) return null;
    var mid = Math.floor(across ? t.top + t.height / 2 : t.left + t.width / 2) + 0.5;
    var to = across ? [best + 0.5, mid] : [mid, best + 0.5];
    var ends = across ? [[Math.floor(t.left) + 1.5, mid], [Math.ceil(t.right) - 1.5, mid]]
                      : [[mid, Math.floor(t.top) + 1.5], [mid, Math.ceil(t.bottom) - 1.5]];
    var far = function (p) { return Math.abs(p[0] - h[0]) + Math.abs(p[1] - h[1]); };
    var press = far(ends[0]) > far(ends[1]) ? ends[0] : ends[1];
    return [{drag: [press, [to[0] - press[0], to[1] - press[1]]]}, {click: centre(submit)}];
  }
  return null;
})(%s, %d)"""
FRAME = "JSON.stringify(document.getElementById('task').getBoundingClientRect())"


@contextmanager
def episode_page(name: str, seed: int) -> Iterator[tuple[Episode, str]]:
    """The page server an episode of ``name`` at ``seed`` runs, in this process."""
    episode = Episode(name, seed, installed().html)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(episode))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield episode, f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


async def _load(page: Page, episode: Episode, url: str) -> None:
    await page.call("Page.navigate", url=url)

    async def painted() -> bool:
        return episode.state.painted.is_set()

    with anyio.fail_after(60):
        await wait_until(painted, poll_s=0.05)


async def plan(page: Page, name: str, seed: int) -> list[dict[str, Any]]:
    """The steps that solve ``name`` at ``seed`` (task-page pixels), read from its DOM."""
    with episode_page(name, seed) as (episode, url):
        await _load(page, episode, url)
        steps = await page.evaluate(PLAN % (json.dumps(name), ZOOM))
    assert steps, f"the test's actor does not play {name}"
    return steps


async def replay(page: Page, name: str, seed: int, steps: list[dict[str, Any]]) -> float | None:
    """The raw reward the page at ``seed`` gives ``steps`` done through DevTools mouse events at the
    wrapper's geometry (None if it never reported)."""
    with episode_page(name, seed) as (episode, url):
        await _load(page, episode, url)
        frame = json.loads(await page.evaluate(FRAME))
        for step in steps:
            if "click" in step:
                x, y = pixels(frame["left"], frame["top"], step["click"])
                for kind in ("mousePressed", "mouseReleased"):
                    await page.call(
                        "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
                    )
            else:
                (x0, y0), (x1, y1) = drag_pixels(frame["left"], frame["top"], step["drag"])
                await page.call("Input.dispatchMouseEvent", type="mouseMoved", x=x0, y=y0)
                await page.call("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left",
                                clickCount=1)  # fmt: skip
                await page.call("Input.dispatchMouseEvent", type="mouseMoved", x=x1, y=y1, button="left")
                await page.call("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y1, button="left",
                                clickCount=1)  # fmt: skip

        async def reported() -> bool:
            return any("wob" in e for e in episode.state.snapshot())

        with anyio.move_on_after(10):
            await wait_until(reported, poll_s=0.05)
        wobs = [e["wob"]["raw"] for e in episode.state.snapshot() if "wob" in e]
    return wobs[0] if wobs else None


def pixels(left: float, top: float, point: list[float]) -> tuple[int, int]:
    """The whole pixel (of the desktop, or the shadow's viewport) showing task-page ``point`` of a frame
    whose corner is at (``left``, ``top``)."""
    return round(left + ZOOM * point[0]), round(top + ZOOM * point[1])


def drag_pixels(left: float, top: float, drag: list[list[float]]) -> tuple[tuple[int, int], tuple[int, int]]:
    """Where a drag step presses and releases: the release is the press moved by the step's distance in
    whole pixels (so the distance is off by half a pixel at most, whatever the press's rounding)."""
    (x, y), (dx, dy) = pixels(left, top, drag[0]), drag[1]
    return (x, y), (x + round(ZOOM * dx), y + round(ZOOM * dy))


def actor_app(plans: Mapping[tuple[str, int], list[dict[str, Any]]], desktop: tuple[int, int],
              seen: dict[tuple[str, int], Frame]) -> FastAPI:  # fmt: skip
    """``POST /actor/{name}/{seed}/v1/chat/completions``: the plan's next step (a click, a drag, or a
    ``navigate`` to a URL) as a computer-1 reply, then done (twice: computer-1 asks to confirm). Where it
    found the frame is kept in ``seen``."""
    app = FastAPI()

    @app.post("/actor/miniwob/{name}/{seed}/v1/chat/completions")
    async def complete(name: str, seed: int, request: Request) -> JSONResponse:
        messages = chat_messages(await request.json())
        replies = [
            m["content"] for m in messages if m.get("role") == "assistant" and isinstance(m["content"], str)
        ]
        steps = plans[(name, seed)]
        done = progress(replies)
        action: dict[str, Any] = {"type": "done", "result": "done"}
        if done < len(steps) and "navigate" in steps[done]:
            action = {"type": "navigate", "url": steps[done]["navigate"]}
        elif done < len(steps):
            shot = latest_screenshot(messages)
            found = frame_on(shot, desktop) if shot is not None else None
            if found is None:
                action = {"type": "wait", "duration": 1}
            else:
                seen[(name, seed)] = found
                step = steps[done]
                if "click" in step:
                    x, y = to_grid(*pixels(found.left, found.top, step["click"]), desktop)
                    action = {"type": "click", "x": x, "y": y}
                else:
                    press, release = drag_pixels(found.left, found.top, step["drag"])
                    (x, y), (ex, ey) = to_grid(*press, desktop), to_grid(*release, desktop)
                    action = {"type": "drag", "x": x, "y": y, "end_x": ex, "end_y": ey}
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": "miniwob-actor",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply_text(action)},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
        })  # fmt: skip

    return app


def episode(port: int, name: str, seed: int, path: Path | None = None, route: str = "actor") -> EpisodeRun:
    """The episode of ``name`` at ``seed``, its model the OpenAI-compatible ``route`` on ``port``
    (``/route/miniwob/<name>/<seed>/v1``)."""
    task = TaskRef(name=f"miniwob/{name}", path=str(path) if path else None)
    work = WorkRequest(
        run_id="miniwob", group_id=f"g-{name}", episode_id=f"{name}-{seed}", task=task,
        sample_index=0, group_size=1, policy_version=0, created_at=time.time(),
    )  # fmt: skip
    return EpisodeRun(
        work=work, attempt=1, seed=seed, session_url=f"http://127.0.0.1:{port}/{route}/{task.name}/{seed}/v1",
        session_key=Secret("actor-key"), context_length=32768,
    )  # fmt: skip


async def play(
    plans: dict[tuple[str, int], list[dict[str, Any]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    desktop: tuple[int, int],
    paths: dict[str, Path] | None = None,
    environment: str = "local-desktop",
) -> tuple[dict[str, OutcomeEvent], dict[tuple[str, int], Frame]]:
    """One Harbor trial per plan in ``environment``, three at a time (a task by name, exported on demand
    by the producer, or from ``paths``); the outcomes by task, and where the actor saw each frame."""
    seen: dict[tuple[str, int], Frame] = {}
    app = actor_app(plans, desktop, seen)
    outcomes = await trials(app, "actor", list(plans), tmp_path, monkeypatch, desktop, paths, environment)
    return outcomes, seen


async def trials(
    app: FastAPI,
    route: str,
    instances: list[tuple[str, int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    desktop: tuple[int, int],
    paths: dict[str, Path] | None = None,
    environment: str = "local-desktop",
    turns: int = 8,
) -> dict[str, OutcomeEvent]:
    """One Harbor trial per task instance in ``environment``, three at a time, its model ``app``'s
    ``route``; the outcomes by task."""
    monkeypatch.setenv("CUA_CACHE_DIR", str(tmp_path / "cache"))  # the producer's on-demand export lands here
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    config = ProducerConfig(trials_dir=str(tmp_path / "trials"), max_turns=turns, environment=environment,
                            desktop_width=desktop[0], desktop_height=desktop[1])  # fmt: skip
    runner = TrialRunner(config)
    outcomes: dict[str, OutcomeEvent] = {}
    limit = anyio.CapacityLimiter(3)

    async def one(name: str, seed: int) -> None:
        async with limit:
            run = episode(port, name, seed, (paths or {}).get(name), route)
            outcomes[name] = (await runner.run(run)).outcome

    with serving(server), anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for name, seed in instances:
                tg.start_soon(one, name, seed)
    return outcomes
