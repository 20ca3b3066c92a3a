"""The dashboard's I/O: a reader that folds every topic into the board (live, or a replayed range), and
the web app: the page, its server-sent events, an episode's detail, a step's rebuild, and screenshots
from the blob store.

The records are written by whoever reaches the broker, and the page is served to whoever reaches the
port, so: every JSON body is strict JSON (a NaN in a record is the string "NaN", never a bare token that
turns the answer into a 500 or the stream into an unparsable event); the summary is bounded (the board)
and built once per change, however many streams read it; the page renders record strings as text under
a Content-Security-Policy that allows only its own script; requests in progress (``max_connections``),
live streams (``max_streams``) and step rebuilds (``INSPECTS_AT_ONCE``) are capped, each refusal a 503
with Retry-After at once (logged once a minute); a rebuild whose client leaves is cancelled; a stream
that cannot be written for ``stream_send_timeout_s`` is closed and every stream ends after
``stream_max_s`` (the browser reconnects); token ids outside the vocabulary are shown as such; any
unexpected error is a JSON 500.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, Literal

import anyio
import anyio.from_thread
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response

from consumers.dashboard.board import Board, count
from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.web import (
    EventStream,
    Refusals,
    RequestCap,
    SecurityHeaders,
    Slots,
    StrictJSON,
    busy,
    unless_client_leaves,
)
from consumers.trainer.inspect.read import read_step
from consumers.trainer.inspect.render import Text, step_document, step_text
from consumers.trainer.inspect.step import StepBatch, StepRules
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
from cua_stream.config import BusConfig
from cua_stream.errors import BlobCorrupted, BlobNotFound, RecordError
from cua_stream.topics import ALL

log = logging.getLogger(__name__)

SHA256 = re.compile(r"[0-9a-f]{64}")
PUSH_EVERY_S = 1.0
STREAM_RETRY_MS = 2000
"""How soon a browser reconnects a stream the server ended (``stream_max_s``, a restart)."""
_ASSETS = {"/": ("page.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
           "/charts.js": ("charts.js", "text/javascript"), "/app.css": ("app.css", "text/css"),
           "/vendor/uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", "text/javascript"),
           "/vendor/uPlot.min.css": ("vendor/uPlot.min.css", "text/css")}  # fmt: skip
"""Path -> (package file, type). The charting library is vendored (``scripts/vendor-charts.sh``): the page
loads nothing from elsewhere, as its Content-Security-Policy says."""


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
            count(board.dead_letters, "undecodable (seen by the dashboard)")
            continue
        try:
            board.add(event)
        except Exception as e:  # one odd record must not stop the page: counted, and the reading goes on
            log.warning("%s[%d]@%d could not be shown: %r", msg.topic, msg.partition, msg.offset, e)
            count(board.dead_letters, f"not shown by the dashboard ({type(e).__name__})")
    done.set()  # a replayed range is on the board whole


INSPECTS_AT_ONCE = 2
"""Step rebuilds served at once: each reads the run's step, turn, summary and score topics whole. More
are refused (503) rather than queued: 30 abandoned requests had queued 20 s of rebuilds nobody read."""

type StepReader = Callable[[BusConfig, str, int, StepRules], Awaitable[StepBatch]]


class SummaryText:
    """The board's summary and the source's state as one JSON line, built once per change (a record
    folded in, a replay complete), however many streams and requests read it."""

    def __init__(self, board: Board, source: Callable[[], dict[str, Any]]) -> None:
        self.board, self.source = board, source
        self.builds = 0
        self._key: tuple[int, str] | None = None
        self._text = ""

    def __call__(self) -> str:
        source = self.source()
        key = (self.board.records, json_line(source))
        if key != self._key:
            self._key, self._text = key, json_line({**self.board.summary(), **source})
            self.builds += 1
        return self._text


def served(config: DashboardConfig, app: FastAPI) -> uvicorn.Config:
    """How ``cua-stream dashboard`` serves ``app``: without uvicorn's ``limit_concurrency``, which counts
    connections whose request it has not read yet and refuses without Retry-After; the app caps the
    requests in progress itself (``RequestCap``, ``max_connections``)."""
    return uvicorn.Config(app, host=config.host, port=config.port, log_level="warning")


def build_app(
    config: DashboardConfig,
    board: Board | None = None,
    rules: StepRules | None = None,
    rebuild: StepReader = read_step,
) -> FastAPI:
    """``rules``: the trainer's group rules and ``max_seq_len`` (its config section), for the inspect route;
    ``rebuild`` reads and rebuilds a step (``consumers.trainer.inspect.read.read_step``)."""
    board = board or Board()
    rules = rules or StepRules()
    blobs = open_blob_store(config.blobs)
    decode = _decoder(config.model_path)
    inspecting = Slots(INSPECTS_AT_ONCE)
    done = anyio.Event()
    summary_text = SummaryText(board, lambda: _source(config, done))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_into, board, config, done)
            yield
            tg.cancel_scope.cancel()

    app = FastAPI(title="cua-stream dashboard", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.board = board
    app.state.summary = summary_text
    app.state.streams = streams = Slots(config.max_streams)
    app.state.refusals = refusals = Refusals()

    app.add_middleware(RequestCap, limit=config.max_connections)
    app.add_middleware(SecurityHeaders)  # the outer one: a refusal of RequestCap's carries them too

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> StrictJSON:
        log.exception("%s %s failed", request.method, request.url.path)
        return StrictJSON({"detail": f"internal error ({type(error).__name__})"}, status_code=500)

    for path, (name, mime) in _ASSETS.items():
        app.add_api_route(path, _asset(name, mime), methods=["GET"], include_in_schema=False)

    @app.get("/api/summary")
    async def summary() -> Response:
        return Response(summary_text(), media_type="application/json")

    @app.get("/api/stream")
    async def stream() -> Response:
        if not streams.take():
            refusals.refused(config.max_streams)
            return busy(f"{config.max_streams} live streams are open (dashboard.max_streams); try later")

        async def frames() -> AsyncGenerator[str]:
            yield f"retry: {STREAM_RETRY_MS}\n\n"
            seen = ""
            while True:
                if (text := summary_text()) is not seen:  # the same object until the board changes
                    seen = text
                    yield f"data: {text}\n\n"
                else:
                    yield ": idle\n\n"  # a comment line keeps proxies from closing a quiet stream
                await anyio.sleep(PUSH_EVERY_S)

        return EventStream(
            frames(),
            send_timeout_s=config.stream_send_timeout_s,
            max_s=config.stream_max_s,
            on_close=streams.give,
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
    async def inspect_step(
        request: Request, run: str, step: int, format: Literal["json", "text"] = "json"
    ) -> Response:
        """``cua-stream inspect step --run RUN --step STEP`` (``--json`` unless ``format=text``): the
        batch the step trained, rebuilt from the topics and checked against its record. Beyond
        ``INSPECTS_AT_ONCE`` at once, 503; a client that leaves cancels its rebuild."""
        if not inspecting.take():
            return busy(f"{INSPECTS_AT_ONCE} step rebuilds are in progress; try later")
        text = decode if config.model_path else None

        async def answer() -> Response:
            try:
                batch = await rebuild(config.bus, run, step, rules)
            except LookupError as e:
                raise HTTPException(404, str(e)) from None
            if format == "text":
                lines = await anyio.to_thread.run_sync(_step_lines, batch, rules, _cancellable(text))
                return Response("\n".join(lines) + "\n", media_type="text/plain; charset=utf-8")
            return StrictJSON(await anyio.to_thread.run_sync(step_document, batch, rules, _cancellable(text)))

        try:
            answered = await unless_client_leaves(request.receive, answer)
        finally:
            inspecting.give()
        return Response(status_code=499) if answered is None else answered[0]  # 499: nobody to read it

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


def _step_lines(batch: StepBatch, rules: StepRules, text: Text) -> list[str]:
    """``inspect step``'s text, in a worker thread that stops between lines once its request is cancelled."""
    lines = []
    for line in step_text(batch, rules, text):
        anyio.from_thread.check_cancelled()
        lines.append(line)
    return lines


def _cancellable(text: Text) -> Text:
    """``text`` (token ids to text, the slow part of a rendering) stopping its worker thread once the
    request it serves is cancelled (a thread cannot be cancelled from outside: it is asked at each call)."""
    if text is None:
        return None

    def decode(ids: Sequence[int]) -> str:
        anyio.from_thread.check_cancelled()
        return text(ids)

    return decode


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
