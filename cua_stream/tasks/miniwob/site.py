"""What a MiniWoB++ episode's server answers (``cua_stream.tasks.server --task miniwob/<name>``).

- ``GET /``: the wrapper page (``wrapper.page``) holding the task's page; once the page has reported its
  reward, a page saying the episode ended (no second episode). A load after the episode started (the
  ready probe posted ``/armed``) is recorded as leaving the page: the agent reloading its task, in this
  tab or another, scores 0 (before that, loads are the harness's own: computer-1's navigation and the
  binding's re-navigations while the page is not yet on screen).
- ``GET /mw/<path>``: the package's ``html/``, read-only: plain files under it only (no ``..``, no link
  out, no listing).
- ``GET /state``: the events, for the verifier (never the token). ``GET /painted``: the ready signal.
- ``POST /state``, ``POST /painted``: only from the wrapper's script: a JSON body (``Content-Type:
  application/json``) carrying the episode's token, from this server's own origin (``Origin`` equal to
  ``http://<Host>``). ``/state`` takes one ``wob`` report (the raw reward, finite, in [-1, 1]) or a
  ``left``; after the report, nothing more (409).
- ``POST /armed``: the ready probe, once the page is on screen; only without an ``Origin`` header (a
  browser always sends one with a POST, so a page cannot arm, and arming only makes the rules stricter).

Why the agent cannot write its reward: its actions are the desktop's mouse and keyboard (computer-1 has
no shell unless a task opts in). It can navigate, but the desktop's Chromium refuses ``javascript:`` URLs
(the managed policy's ``URLBlocklist``), and computer-1 itself refuses ``view-source:``, DevTools keys
and URLs; a page it opens elsewhere (``data:``, another origin) has another ``Origin`` and no token, and
a cross-origin JSON POST is preflighted, which this server never grants. Same-origin pages run only the
package's own scripts. So the one report comes from the task's own ``core.endEpisode``. Standard library
only.
"""

from __future__ import annotations

import hmac
import json
import math
import mimetypes
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from cua_stream.errors import TaskVersionMismatch, UnknownTask
from cua_stream.tasks.miniwob import PREFIX
from cua_stream.tasks.miniwob.package import installed
from cua_stream.tasks.miniwob.wrapper import STATIC, ended_page, page
from cua_stream.tasks.server import MAX_BODY, Responder, TaskState, foreign_post

JSON = "application/json"


class Episode:
    """One episode's page and what it reported."""

    def __init__(self, name: str, seed: int, html: Path, token: str | None = None) -> None:
        self.name, self.seed, self.html = name, seed, html
        self.token = token or secrets.token_urlsafe(24)
        self.state = TaskState()
        self.armed = False
        self.reported = False
        self._lock = threading.Lock()

    def front_page(self) -> str:
        with self._lock:
            if self.reported:
                return ended_page()
            if self.armed:
                self.state.add({"left": "the task's page was loaded again after the episode started"})
        return page(self.name, self.seed, self.token)

    def post(self, path: str, origin: str | None, host: str | None, ctype: str, body: bytes) -> int:
        """The status of a POST to ``path`` (and what it records)."""
        if path == "/armed":
            if origin is not None:
                return 403
            with self._lock:
                if not self.armed:
                    self.armed = True
                    self.state.add({"armed": True})
            return 204
        if path not in ("/state", "/painted"):
            return 404
        if refused := foreign_post(origin, host, ctype):
            return refused
        try:
            report = json.loads(body)
        except ValueError:
            return 400
        if not isinstance(report, dict) or not isinstance(report.get("token"), str):
            return 403
        if not hmac.compare_digest(report["token"].encode(), self.token.encode()):
            return 403
        if path == "/painted":
            if not self.state.painted.is_set():
                self.state.add({"painted": {k: report.get(k) for k in ("frame", "zoom", "viewport")}})
                self.state.painted.set()
            return 204
        event = _report(report)
        if event is None:
            return 400
        with self._lock:
            if self.reported:
                return 409
            self.reported = "wob" in event
            self.state.add(event)
        return 204


def _report(report: dict[str, Any]) -> dict[str, Any] | None:
    """The event a ``/state`` post records: a ``wob`` reward report (its raw reward finite, in [-1, 1]),
    or a ``left``; None for anything else."""
    if "left" in report and isinstance(report["left"], str):
        return {"left": report["left"][:200]}
    wob = report.get("wob")
    if not isinstance(wob, dict):
        return None
    raw, scaled = wob.get("raw"), wob.get("reward")
    if not all(_finite(v) and -1.0 <= v <= 1.0 for v in (raw, scaled)):
        return None
    reason = wob.get("reason")
    ms = wob.get("ms")
    return {
        "wob": {
            "raw": float(raw),
            "reward": float(scaled),
            "reason": str(reason)[:200] if reason is not None else None,
            "ms": float(ms) if _finite(ms) else None,
        }
    }


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def static_file(root: Path, rel: str) -> Path | None:
    """The plain file ``rel`` (URL-encoded, ``/``-separated) names under ``root``, or None: no empty, ``.``
    or ``..`` segment, no backslash or NUL, and with every link resolved still under ``root``."""
    rel = unquote(rel)
    parts = rel.split("/")
    if "\0" in rel or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        return None
    real = os.path.realpath(root.joinpath(*parts))
    if not real.startswith(os.path.realpath(root) + os.sep) or not os.path.isfile(real):
        return None
    return Path(real)


def handler(episode: Episode) -> type[BaseHTTPRequestHandler]:
    class Handler(Responder):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/":
                self._send(200, episode.front_page().encode(), "text/html; charset=utf-8")
            elif path == "/state":
                body = json.dumps({"events": episode.state.snapshot()}).encode()
                self._send(200, body, JSON)
            elif path == "/painted":
                ready = episode.state.painted.is_set()
                self._send(200 if ready else 503, b"painted" if ready else b"not yet", "text/plain")
            elif path.startswith(STATIC) and (found := static_file(episode.html, path[len(STATIC) :])):
                ctype = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
                self._send(200, found.read_bytes(), ctype)
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY:
                self._send(413, b"too large", "text/plain")
                return
            body = self.rfile.read(length)
            status = episode.post(
                urlsplit(self.path).path,
                self.headers.get("Origin"),
                self.headers.get("Host"),
                self.headers.get("Content-Type") or "",
                body,
            )
            self._send(status, b"", "text/plain")

    return Handler


def episode_handler(task: str, seed: int, exported_from: str | None) -> type[BaseHTTPRequestHandler]:
    """The handler of an episode of ``task`` (``miniwob/<name>``) on layout ``seed``, after checking the
    installed package has its page and, when given, is the version the task was exported from."""
    package = installed()
    if exported_from is not None and exported_from != package.version:
        raise TaskVersionMismatch(
            f"{task} was exported from MiniWoB++ {exported_from}, but {package.version} is installed here: "
            "export the tasks again (cua-stream tasks export miniwob DIR)"
        )
    name = task.removeprefix(PREFIX)
    if static_file(package.html, f"miniwob/{name}.html") is None:
        raise UnknownTask(f"MiniWoB++ {package.version} has no page {name!r}")
    return handler(Episode(name, seed, package.html))
