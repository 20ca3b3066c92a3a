"""The dashboard's I/O: a reader that folds every topic into the board (live, or a replayed range), and
the web app: the page, its server-sent events, an episode's detail, and screenshots from the blob store."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import anyio
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from consumers.dashboard.board import Board
from consumers.dashboard.config import DashboardConfig
from cua_stream.blobs import open_blob_store
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
            board.add(decode_message(by_name, msg).event)
        except RecordError:
            board.dead_letters["undecodable (seen by the dashboard)"] += 1
    done.set()  # a replayed range is on the board whole


def build_app(config: DashboardConfig, board: Board | None = None) -> FastAPI:
    board = board or Board()
    blobs = open_blob_store(config.blobs)
    decode = _decoder(config.model_path)
    done = anyio.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_into, board, config, done)
            yield
            tg.cancel_scope.cancel()

    app = FastAPI(title="cua-stream dashboard", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.board = board

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return resources.files("consumers.dashboard").joinpath("page.html").read_text()

    @app.get("/api/summary")
    async def summary() -> JSONResponse:
        return JSONResponse({**board.summary(), **_source(config, done)})

    @app.get("/api/stream")
    async def stream() -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            seen = -1
            while True:
                if board.records != seen:
                    seen = board.records
                    yield f"data: {json.dumps({**board.summary(), **_source(config, done)})}\n\n"
                else:
                    yield ": idle\n\n"  # a comment line keeps proxies from closing a quiet stream
                await anyio.sleep(PUSH_EVERY_S)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    @app.get("/api/episodes/{episode_id}")
    async def episode(episode_id: str) -> JSONResponse:
        ep = board.episodes.get(episode_id)
        if ep is None:
            raise HTTPException(
                404, f"episode {episode_id!r} is not among the {len(board.episodes)} recent ones"
            )
        return JSONResponse(
            {
                "episode_id": ep.episode_id, "group_id": ep.group_id, "task": ep.task, "verdict": ep.verdict,
                "outcome": ep.outcome,
                "calls": [
                    {"seq": c.seq, "attempt": c.attempt, "kind": c.kind, "images": c.images,
                     "action": decode(c.completion_ids), "finish_reason": c.finish_reason,
                     "policy_version": c.policy_version, "engine_ms": c.engine_ms}
                    for c in ep.calls
                ],
            }
        )  # fmt: skip

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


def _decoder(model_path: str) -> Any:
    if not model_path:
        return lambda ids: " ".join(map(str, ids))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def _mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"
