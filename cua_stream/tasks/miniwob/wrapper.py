"""The page an episode of a MiniWoB++ task shows: the task's own page, unmodified, in a same-origin frame.

**Geometry.** MiniWoB++ draws every task in a 160x210 area (``#wrap``: the yellow ``#query`` banner, 50
pixels tall, over the task's ``#area``); its 10-pixel text is too small to read in a desktop screenshot
(the Python package crops its screenshots to that area). The wrapper shows the task page in an iframe of
exactly that size, magnified by CSS ``zoom: ZOOM`` (2: a 320x420 box, 20-pixel text), horizontally
centred and ``FRAME_TOP`` pixels below the top of the browser's viewport, on a ``#f4f4f4`` background
(the ready probe's sign that the page is drawn: ``cua_stream.tasks.ready``). A point (x, y) of the task
page (its CSS pixels, as ``getBoundingClientRect`` inside the frame gives them) is at

    viewport (frame.left + ZOOM * x, frame.top + ZOOM * y),  frame.left = (viewport width - 320) / 2

and on the screen at the viewport's origin plus that (Chromium's tab strip and toolbar sit above the
viewport; computer-1 maximises the window). On the default 800x600 desktop the frame's box is viewport
(240, 20)-(560, 440). Chromium zooms the framed document as a whole (page zoom), so the task's own
coordinate maths (``event.pageX`` in circle-center, jQuery UI drags) sees its own unzoomed pixels: clicks
land where the screenshot shows them. The page posts the frame's measured box, the zoom and the viewport
with ``/painted``, for whoever maps DOM boxes to the screen.

**The episode.** On the frame's first ``load`` (after the task's own ``onload`` made its START cover), the
wrapper script: hides the reward display and the click canvas; sets ``core.EPISODE_MAX_TIME`` to a day,
so MiniWoB++'s wall-clock timer neither ends the episode nor scales the reward (the verdict uses the raw
reward); wraps ``core.endEpisode`` to post the raw reward, the time-scaled one and the reason to
``/state`` once; wraps ``core.startEpisode`` so the cover shown after the end says DONE and starts
nothing (one episode per page); seeds ``Math.seedrandom`` with ``"<task>:<seed>"`` (the group's layout
seed: same seed, same problem) and starts with ``core.startEpisodeReal()`` (no START cover); and posts
``/painted`` two animation frames later. A second load of the frame (the task navigated itself) or the
page being left before the episode ended is posted as ``left``, which the verdict scores 0.

Every post carries the episode's token (minted by the server, in this page only) and is same-origin:
the server (``site``) accepts nothing else. Standard library only.
"""

from __future__ import annotations

import html
import json

ZOOM = 2
TASK_W, TASK_H = 160, 210
"""MiniWoB++'s task area (``#wrap`` in core.css), in the task page's CSS pixels."""
FRAME_TOP = 20
"""Viewport pixels above the zoomed frame."""
BACKGROUND = "#f4f4f4"
EPISODE_MAX_MS = 24 * 3600 * 1000
"""``core.EPISODE_MAX_TIME`` during an episode: a day (far beyond any agent timeout, and below
setTimeout's 2**31 - 1 ms limit, past which the timer would fire at once)."""
STATIC = "/mw/"
"""Where the package's ``html/`` is served (``/mw/miniwob/<task>.html``, ``/mw/core/core.js``)."""

_SCRIPT = """
(function () {
  "use strict";
  var TOKEN = %(token)s, NAME = %(name)s, SEED = %(seed)s, ZOOM = %(zoom)d, MAX_MS = %(max_ms)d;
  var loads = 0, started = false, reported = false, t0 = 0;
  var frame = document.createElement("iframe");
  function post(path, body) {
    body.token = TOKEN;
    return fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                        body: JSON.stringify(body), keepalive: true, credentials: "same-origin"});
  }
  function begin() {
    var w = frame.contentWindow, d = frame.contentDocument, core = w && w.core;
    if (!core || typeof w.genProblem !== "function" || !w.Math || typeof w.Math.seedrandom !== "function") {
      post("/state", {left: "not a MiniWoB++ task page"});
      return;
    }
    var style = d.createElement("style");
    style.textContent = "#reward-display,#click-canvas{display:none!important}html,body{overflow:hidden}";
    d.head.appendChild(style);
    core.EPISODE_MAX_TIME = MAX_MS;
    var end = core.endEpisode;
    core.endEpisode = function () {
      var first = core.EP_TIMER !== null;  // endEpisode counts only its first call (core.js)
      var result = end.apply(this, arguments);
      if (first && !reported) {
        reported = true;
        var reason = w.WOB_REWARD_REASON;
        post("/state", {wob: {raw: Number(w.WOB_RAW_REWARD_GLOBAL), reward: Number(w.WOB_REWARD_GLOBAL),
                              reason: reason === null || reason === undefined ? null : String(reason),
                              ms: Date.now() - t0}});
      }
      return result;
    };
    var cover = core.startEpisode;
    core.startEpisode = function () {  // endEpisode shows the START cover again: make it the end
      var result = cover.apply(this, arguments);
      if (core.cover_div) {
        core.cover_div.innerHTML = "DONE";
        core.cover_div.onclick = null;
        core.cover_div.style.cursor = "default";
      }
      return result;
    };
    w.Math.seedrandom(NAME + ":" + SEED);
    core.startEpisodeReal();
    started = true;
    t0 = Date.now();
    requestAnimationFrame(function () { requestAnimationFrame(function () {
      var r = frame.getBoundingClientRect();
      post("/painted", {frame: [r.left, r.top, r.width, r.height], zoom: ZOOM,
                        viewport: [innerWidth, innerHeight]});
    }); });
  }
  frame.addEventListener("load", function () {
    loads += 1;
    if (loads === 1) begin();
    else if (!reported) post("/state", {left: "the task's frame loaded another page"});
  });
  addEventListener("pagehide", function () {
    if (started && !reported) post("/state", {left: "the page was left before the episode ended"});
  });
  frame.id = "task";
  frame.title = NAME;
  frame.setAttribute("scrolling", "no");
  frame.src = %(src)s;
  document.getElementById("stage").appendChild(frame);
})();
"""


def page(name: str, seed: int, token: str) -> str:
    """The wrapper page of task ``name`` (registered, its page under ``STATIC``) for layout ``seed``."""
    script = _SCRIPT % {
        "token": json.dumps(token),
        "name": json.dumps(name),
        "seed": json.dumps(str(seed)),
        "zoom": ZOOM,
        "max_ms": EPISODE_MAX_MS,
        "src": json.dumps(f"{STATIC}miniwob/{name}.html"),
    }
    return _document(
        html.escape(name),
        f"<div id='stage'></div><script>{script}</script>",
        f"#stage{{position:absolute;left:0;right:0;top:{FRAME_TOP}px;display:flex;justify-content:center}}"
        f"#task{{display:block;border:0;margin:0;padding:0;width:{TASK_W}px;height:{TASK_H}px;zoom:{ZOOM};"
        "background:#fff}",
    )


def ended_page() -> str:
    """What ``/`` shows once the episode's page has reported its reward: no task, no second episode."""
    return _document(
        "episode over",
        "<p style='margin:40px;font:20px sans-serif;color:#333'>This episode has ended.</p>",
        "",
    )


def _document(title: str, body: str, style: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>MiniWoB++ {title}</title><style>html,body{{margin:0;background:{BACKGROUND};"
        f"overflow:hidden}}{style}</style></head><body>{body}</body></html>"
    )
