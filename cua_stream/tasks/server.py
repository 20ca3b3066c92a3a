"""The task's web server, started inside the episode's namespace (``environment/start.sh``).

Serves the seed's pages and keeps what the page reports (``POST /state``) for the verifier
(``GET /state``). ``GET /painted`` answers 200 once a page has been drawn (the page posts to it after its
first frame), 503 before: the task's ``ready_probe``, so the agent's first screenshot shows the page
rather than the browser mid-navigation. A ``miniwob/<name>`` task is served by
``cua_stream.tasks.miniwob.site`` (the package's own page, and a stricter ``/state``). Standard library
only: it runs on the episode's loopback, one per episode.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from cua_stream.tasks.pages import Layout, layout, render

MAX_EVENTS = 1000
MAX_BODY = 64 * 1024


class TaskState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.painted = threading.Event()

    def add(self, event: dict[str, Any]) -> None:
        with self._lock:
            if len(self.events) < MAX_EVENTS:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)


class Responder(BaseHTTPRequestHandler):
    """A quiet handler with one way to answer."""

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the episode's log is for the desktop's programs."""


def foreign_post(origin: str | None, host: str | None, ctype: str | None) -> int | None:
    """The status refusing a report that the task's own page did not send, else None. The page posts
    JSON from this server's origin; a page the agent could open itself (a ``data:`` URL, another origin)
    has another ``Origin``, and its JSON post needs a preflight this server never grants, so the
    verifier's events stay the task page's acts (docs/miniwob.md, security)."""
    if origin is None or host is None or origin != f"http://{host}":
        return 403
    if (ctype or "").split(";")[0].strip().lower() != "application/json":
        return 415
    return None


def handler(lay: Layout, state: TaskState) -> type[BaseHTTPRequestHandler]:
    class Handler(Responder):
        def do_GET(self) -> None:
            if self.path == "/state":
                self._send(200, json.dumps({"events": state.snapshot()}).encode(), "application/json")
            elif self.path == "/painted":
                ready = state.painted.is_set()
                self._send(200 if ready else 503, b"painted" if ready else b"not yet", "text/plain")
            elif self.path == "/":
                self._send(200, render(lay).encode(), "text/html; charset=utf-8")
            elif self.path.startswith("/page/") and unquote(self.path[6:]) in lay.subpages:
                self._send(200, render(lay, unquote(self.path[6:])).encode(), "text/html; charset=utf-8")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path == "/painted":
                state.painted.set()
                self._send(204, b"", "text/plain")
                return
            if self.path != "/state" or not 0 < length <= MAX_BODY:
                self._send(400, b"bad request", "text/plain")
                return
            headers = self.headers
            if status := foreign_post(
                headers.get("Origin"), headers.get("Host"), headers.get("Content-Type")
            ):
                self._send(status, b"refused", "text/plain")
                return
            try:
                event = json.loads(self.rfile.read(length))
            except ValueError:
                self._send(400, b"not JSON", "text/plain")
                return
            if isinstance(event, dict):
                state.add(event)
            self._send(204, b"", "text/plain")

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--miniwob-version", help="miniwob/* tasks: the MiniWoB++ version the task was exported from"
    )
    args = parser.parse_args()
    if args.task.startswith("miniwob/"):
        from cua_stream.tasks.miniwob.site import episode_handler

        served = episode_handler(args.task, args.seed, args.miniwob_version)
    else:
        served = handler(layout(args.task, args.seed), TaskState())
    ThreadingHTTPServer(("127.0.0.1", args.port), served).serve_forever()


if __name__ == "__main__":
    main()
