"""The dashboard's HTTP plumbing, apart from its routes: strict JSON, the security headers, a server-sent
event stream, and the limits that keep whoever reaches the port from taking the server.

Every refusal for want of capacity is a JSON 503 with ``Retry-After`` (``busy``), said at once: requests
in progress are capped by the app itself (``RequestCap``), live streams and step rebuilds by their own
``Slots``, and work whose client has gone is cancelled (``unless_client_leaves``), so an abandoned
request holds nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import anyio
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cua_stream.bus.codec import json_line

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
"""What a refusal for want of capacity tells the client to wait (``Retry-After``)."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class StrictJSON(JSONResponse):
    """JSON that a browser's parser takes: non-finite floats as "NaN" / "Infinity" / "-Infinity"."""

    def render(self, content: object) -> bytes:
        return json_line(content).encode()


def busy(detail: str) -> StrictJSON:
    """A refusal for want of capacity: 503, and when to try again."""
    return StrictJSON({"detail": detail}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


class Refusals:
    """Counts refusals of one limit; logs the first of a burst at once, then at most one line a minute."""

    def __init__(
        self,
        setting: str = "dashboard.max_streams",
        what: str = "live-stream connection",
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.setting, self.what, self.every_s, self.clock = setting, what, every_s, clock
        self.total = 0
        self._unlogged = 0
        self._logged_at = -float("inf")

    def refused(self, limit: int) -> None:
        self.total += 1
        self._unlogged += 1
        if self.clock() - self._logged_at >= self.every_s:
            log.warning("refused %d %s(s): %d open (%s)", self._unlogged, self.what, limit, self.setting)
            self._unlogged, self._logged_at = 0, self.clock()


class Slots:
    """At most ``limit`` holders at once: ``take`` is False when every slot is held (the caller refuses
    at once rather than queue: a queued request holds its connection, and its client may be long gone)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0

    def take(self) -> bool:
        if self.held >= self.limit:
            return False
        self.held += 1  # taken before any await: a burst cannot slip past the limit
        return True

    def give(self) -> None:
        self.held -= 1


class RequestCap:
    """ASGI middleware: at most ``limit`` HTTP requests in progress (live streams included); beyond, a
    503 with ``Retry-After`` at once. The app counts them rather than uvicorn (``limit_concurrency``):
    uvicorn counts every open connection, even one whose request it has not read yet, and refuses without
    ``Retry-After`` (300 clients at the same instant got 19 of the 64 streams, and 281 bare 503s)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.slots = app, Slots(limit)
        self.refusals = Refusals("dashboard.max_connections", "request")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.slots.take():
            self.refusals.refused(self.slots.limit)
            detail = f"{self.slots.limit} requests are in progress (dashboard.max_connections); try later"
            await busy(detail)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.give()


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every response (a plain wrapper of ``send``, so streams
    keep their back-pressure and disconnects)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


async def _until_disconnected(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` once the client has gone (its request's body, if any, is read and dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def unless_client_leaves[T](receive: Receive, work: Callable[[], Awaitable[T]]) -> tuple[T] | None:
    """``(work's result,)``, or None if the client disconnected first: then the work was cancelled (a
    rebuild nobody waits for must not hold a slot or the CPU)."""
    result: tuple[T] | None = None
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_until_disconnected, receive, tg.cancel_scope)
        try:
            result = (await work(),)
        except Exception as e:  # raised as itself below, not inside the task group's ExceptionGroup
            failure = e
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


class EventStream(StreamingResponse):
    """Server-sent events from ``frames``, ended by the client's disconnect, a write that does not
    complete in ``send_timeout_s`` (a client that stopped reading), or ``max_s``."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncGenerator[str],
        *,
        send_timeout_s: float,
        max_s: float,
        on_close: Callable[[], object] = lambda: None,
    ) -> None:
        super().__init__(frames, media_type=self.media_type, headers={"Cache-Control": "no-cache"})
        self.frames, self.send_timeout_s, self.max_s, self.on_close = frames, send_timeout_s, max_s, on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._stream(receive, send)
        finally:
            self.on_close()
            with anyio.CancelScope(shield=True):
                await self.frames.aclose()

    async def _stream(self, receive: Receive, send: Send) -> None:
        with anyio.fail_after(self.send_timeout_s):
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_disconnected, receive, tg.cancel_scope)
            with anyio.move_on_after(self.max_s):
                try:
                    async for frame in self.frames:
                        with anyio.fail_after(self.send_timeout_s):
                            await send(
                                {"type": "http.response.body", "body": frame.encode(), "more_body": True}
                            )
                except TimeoutError:
                    log.info("closed a live stream whose client stopped reading")
                    tg.cancel_scope.cancel()
            with anyio.move_on_after(self.send_timeout_s):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()
