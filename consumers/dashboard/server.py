"""The dashboard's I/O: a reader that folds every topic into the board (live, or a replayed range), and
the web app: the page, its server-sent events, an episode's detail, and screenshots from the blob store.

The records are written by whoever reaches the broker, and the page is served to whoever reaches the
port, so: every JSON body is strict JSON (a NaN in a record is the string "NaN", never a bare token that
turns the answer into a 500 or the stream into an unparsable event); the page renders record strings as
text under a Content-Security-Policy that allows only its own script; live streams are capped
(``max_streams``, 503 beyond, the refusals logged once a minute), a stream that cannot be written for
``stream_send_timeout_s`` is closed and every stream ends after ``stream_max_s`` (the browser reconnects);
token ids outside the vocabulary are shown as such; any unexpected error is a JSON 500.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, Literal

import anyio
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.dashboard.board import Board
from consumers.dashboard.config import DashboardConfig
from consumers.trainer.inspect import StepRules
from consumers.trainer.inspect_read import read_step
from consumers.trainer.inspect_render import step_document, step_text
from cua_stream.blobs import open_blob_store
from cua_stream.bus.codec import json_line
from cua_stream.bus.consumer import (
    decode_message,
    make_kafka_consumer,
    partitions_of,
    start_consumer,
    stop_consumer,
)
from cua_stream.bus.reader import Bound, read_topics
from cua_stream.errors import BlobCorrupted, BlobNotFound, RecordError
from cua_stream.topics import ALL

log = logging.getLogger(__name__)

SHA256 = re.compile(r"[0-9a-f]{64}")
PUSH_EVERY_S = 1.0
STREAM_RETRY_MS = 2000
"""How soon a browser reconnects a stream the server ended (``stream_max_s``, a restart)."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_ASSETS = {"/": ("page.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
           "/charts.js": ("charts.js", "text/javascript"), "/app.css": ("app.css", "text/css"),
           "/vendor/uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", "text/javascript"),
           "/vendor/uPlot.min.css": ("vendor/uPlot.min.css", "text/css")}  # fmt: skip
"""Path -> (package file, type). The charting library is vendored (``scripts/vendor-charts.sh``): the page
loads nothing from elsewhere, as its Content-Security-Policy says."""


class StrictJSON(JSONResponse):
    """JSON that a browser's parser takes: non-finite floats as "NaN" / "Infinity" / "-Infinity"."""

    def render(self, content: Any) -> bytes:
        return json_line(content).encode()


class Refusals:
    """Counts refused streams; logs the first of a burst at once, then at most one line a minute."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self.total = 0
        self._unlogged = 0
        self._logged_at = -float("inf")

    def refused(self, limit: int) -> None:
        self.total += 1
        self._unlogged += 1
        if self.clock() - self._logged_at >= self.every_s:
            log.warning("refused %d live-stream connection(s): %d open (dashboard.max_streams)",
                        self._unlogged, limit)  # fmt: skip
            self._unlogged, self._logged_at = 0, self.clock()


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

            async def until_disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_disconnected)
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


async def check_source(config: DashboardConfig) -> int:
    """Before the page is served: the broker answers and the topics exist (else one clear error); the
    number of partitions to read."""
    names = config.bus.topics()
    consumer = make_kafka_consumer(config.bus, group_id=None)
    try:
        await start_consumer(consumer, config.bus)
        parts = [p for spec in ALL for p in await partitions_of(consumer, names.name_of(spec))]
    finally:
        await stop_consumer(consumer)
    if not parts:
        raise LookupError(
            f"no topics under '{config.bus.topic_prefix}.': run `cua-stream topics create` first"
        )
    return len(parts)


async def read_into(board: Board, config: DashboardConfig, done: anyio.Event) -> None:
    """Fold every topic's records from ``config.start`` into ``board``; at ``config.end`` (if set) stop
    and set ``done``, else follow live."""
    by_name = {config.bus.topics().name_of(s): s for s in ALL}
    start = Bound.parse(config.start, default="beginning")
    end = Bound.parse(config.end, default="end") if config.end else None
    async for msg in read_topics(config.bus, list(by_name), start=start, end=end):
        try:
            event = decode_message(by_name, msg).event
        except RecordError:
            board.dead_letters["undecodable (seen by the dashboard)"] += 1
            continue
        try:
            board.add(event)
        except Exception as e:  # one odd record must not stop the page: counted, and the reading goes on
            log.warning("%s[%d]@%d could not be shown: %r", msg.topic, msg.partition, msg.offset, e)
            board.dead_letters[f"not shown by the dashboard ({type(e).__name__})"] += 1
    done.set()  # a replayed range is on the board whole


INSPECTS_AT_ONCE = 2
"""Step rebuilds served at once: each reads the run's step, turn, summary and score topics whole."""


def build_app(config: DashboardConfig, board: Board | None = None, rules: StepRules | None = None) -> FastAPI:
    """``rules``: the trainer's group rules and ``max_seq_len`` (its config section), for the inspect route."""
    board = board or Board()
    rules = rules or StepRules()
    blobs = open_blob_store(config.blobs)
    decode = _decoder(config.model_path)
    inspecting = anyio.CapacityLimiter(INSPECTS_AT_ONCE)
    done = anyio.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_into, board, config, done)
            yield
            tg.cancel_scope.cancel()

    app = FastAPI(title="cua-stream dashboard", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.board = board
    app.state.streams = 0
    app.state.refusals = refusals = Refusals()

    app.add_middleware(SecurityHeaders)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> StrictJSON:
        log.exception("%s %s failed", request.method, request.url.path)
        return StrictJSON({"detail": f"internal error ({type(error).__name__})"}, status_code=500)

    for path, (name, mime) in _ASSETS.items():
        app.add_api_route(path, _asset(name, mime), methods=["GET"], include_in_schema=False)

    @app.get("/api/summary")
    async def summary() -> StrictJSON:
        return StrictJSON({**board.summary(), **_source(config, done)})

    @app.get("/api/stream")
    async def stream() -> Response:
        if app.state.streams >= config.max_streams:
            refusals.refused(config.max_streams)
            return StrictJSON(
                {"detail": f"{config.max_streams} live streams are open (dashboard.max_streams); try later"},
                status_code=503,
                headers={"Retry-After": "5"},
            )

        async def frames() -> AsyncGenerator[str]:
            yield f"retry: {STREAM_RETRY_MS}\n\n"
            seen = -1
            while True:
                if board.records != seen:
                    seen = board.records
                    yield f"data: {json_line({**board.summary(), **_source(config, done)})}\n\n"
                else:
                    yield ": idle\n\n"  # a comment line keeps proxies from closing a quiet stream
                await anyio.sleep(PUSH_EVERY_S)

        def closed() -> None:
            app.state.streams -= 1

        app.state.streams += 1  # counted before any await: a burst cannot slip past the cap
        return EventStream(
            frames(), send_timeout_s=config.stream_send_timeout_s, max_s=config.stream_max_s, on_close=closed
        )

    @app.get("/api/episodes/{episode_id}")
    async def episode(episode_id: str) -> StrictJSON:
        ep = board.episodes.get(episode_id)
        if ep is None:
            raise HTTPException(
                404, f"episode {episode_id!r} is not among the {len(board.episodes)} recent ones"
            )
        return StrictJSON(
            {
                "episode_id": ep.episode_id, "group_id": ep.group_id, "task": ep.task, "verdict": ep.verdict,
                "outcome": ep.outcome, "trained_in": board.trained_in(episode_id),
                "calls": [
                    {"seq": c.seq, "attempt": c.attempt, "kind": c.kind, "images": c.images,
                     "action": decode(c.completion_ids), "finish_reason": c.finish_reason,
                     "policy_version": c.policy_version, "engine_ms": c.engine_ms}
                    for c in ep.calls
                ],
            }
        )  # fmt: skip

    @app.get("/api/inspect/step")
    async def inspect_step(run: str, step: int, format: Literal["json", "text"] = "json") -> Response:
        """``cua-stream inspect step --run RUN --step STEP`` (``--json`` unless ``format=text``): the
        batch the step trained, rebuilt from the topics and checked against its record."""
        async with inspecting:
            try:
                batch = await read_step(config.bus, run, step, rules)
            except LookupError as e:
                raise HTTPException(404, str(e)) from None
        text = decode if config.model_path else None
        if format == "text":
            lines = await anyio.to_thread.run_sync(lambda: list(step_text(batch, rules, text)))
            return Response("\n".join(lines) + "\n", media_type="text/plain; charset=utf-8")
        return StrictJSON(await anyio.to_thread.run_sync(step_document, batch, rules, text))

    @app.get("/blobs/{sha256}")
    async def blob(sha256: str) -> Response:
        if not SHA256.fullmatch(sha256):
            raise HTTPException(400, "a blob is named by its sha256 (64 lowercase hex digits)")
        try:
            data = await anyio.to_thread.run_sync(blobs.get, sha256)
        except BlobNotFound:
            raise HTTPException(404, f"blob {sha256} is not in the store") from None
        except BlobCorrupted:
            raise HTTPException(500, f"blob {sha256} does not hash to its name (corrupted store)") from None
        return Response(data, media_type=_mime(data), headers={"Cache-Control": "max-age=86400, immutable"})

    return app


def _source(config: DashboardConfig, done: anyio.Event) -> dict[str, Any]:
    mode = f"replay {config.start or 'beginning'} .. {config.end}" if config.end else "live"
    return {"source": {"prefix": config.bus.topic_prefix, "mode": mode, "complete": done.is_set()}}


def _asset(name: str, mime: str) -> Callable[[], Any]:
    async def serve() -> Response:
        data = resources.files("consumers.dashboard").joinpath(*name.split("/")).read_bytes()
        return Response(data, media_type=mime)  # text/*: Starlette adds "; charset=utf-8"

    return serve


def _decoder(model_path: str) -> Callable[[Sequence[int]], str]:
    if not model_path:
        return lambda ids: " ".join(map(str, ids))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return lambda ids: readable(
        ids, lambda run: tokenizer.decode(run, skip_special_tokens=False), len(tokenizer)
    )


def readable(ids: Sequence[int], decode: Callable[[list[int]], str], vocab_size: int) -> str:
    """``ids`` as text: runs of ids in the vocabulary decoded, any other shown as ``⟨bad token id N⟩``
    (a -1 in a record had made the episode view a 500)."""
    out: list[str] = []
    run: list[int] = []
    for token in ids:
        if 0 <= token < vocab_size:
            run.append(token)
            continue
        if run:
            out.append(decode(run))
            run = []
        out.append(f"⟨bad token id {token}⟩")
    if run:
        out.append(decode(run))
    return "".join(out)


def _mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"
