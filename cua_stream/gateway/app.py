"""The gateway's HTTP surface (FastAPI). Thin: decode, call the service, encode.

Routes:

- ``POST /sessions`` {run_id, group_id, episode_id, sampling: {temperature, ...}, session_id?}
  → 201 {session_id, base_url}; ``base_url`` (``/sessions/<id>/v1``) is what LiteLLM's api_base gets.
- ``GET /sessions/{id}`` → the session's calls, counts, non-2xx statuses and TITO mismatch report.
- ``DELETE /sessions/{id}`` → the same report, then the session is gone (counted in the metrics).
- ``POST /sessions/{id}/v1/chat/completions`` → OpenAI chat completion (``stream`` → one chunk + [DONE]).
- ``POST /admin/drain`` {timeout_s?} / ``POST /admin/resume`` / ``GET /admin/drain``: the trainer drains
  the gateway around a weight update. Drain stops admitting chat calls (503 with Retry-After, after
  holding each up to ``drain_hold_s``) and answers once the calls in flight have been recorded, or
  after ``timeout_s`` with ``idle: false``; resume re-admits them.
- ``GET /health``, ``GET /metrics`` (Prometheus text).
"""

from __future__ import annotations

import hmac
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from cua_stream.gateway.openai_format import error_body
from cua_stream.gateway.refusal import Refusal
from cua_stream.gateway.service import Gateway, Reply
from cua_stream.gateway.session import SessionSpec

DEFAULT_DRAIN_TIMEOUT_S = 60.0


def _to_response(reply: Reply) -> Response:
    if reply.raw is not None:
        return Response(
            reply.raw, status_code=reply.status, media_type=reply.media_type, headers=reply.headers
        )
    return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)


def _error(status: int, message: str, code: str = "invalid_request") -> JSONResponse:
    return JSONResponse(error_body(status, message, code), status_code=status)


async def _body(request: Request, *, allow_empty: bool = False) -> Any:
    raw = await request.body()
    if not raw and allow_empty:
        return {}
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise Refusal(400, f"request body is not valid JSON: {e}") from None


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def create_app(
    gateway: Gateway | None = None, *, api_key: str | None = None, lifespan: Any = None
) -> FastAPI:
    """The app over ``gateway``, or over the one ``lifespan`` puts in ``app.state.gateway`` at start-up
    (the daemon does that, so the Kafka producer lives in the server's event loop)."""
    app = FastAPI(title="cua-stream session gateway", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.gateway = gateway

    @app.middleware("http")
    async def authorize(request: Request, call_next: Any) -> Response:
        if api_key is not None:
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), api_key.encode()):
                return _error(401, "missing or wrong API key", "unauthorized")
        return await call_next(request)

    @app.post("/sessions", status_code=201)
    async def create_session(request: Request) -> JSONResponse:
        try:
            spec = msgspec.convert(await _body(request), SessionSpec)
            session = _gateway(request).create_session(spec)
        except msgspec.ValidationError as e:
            return _error(400, f"session: {e}")
        except Refusal as r:
            return _error(r.status, r.message, r.code)
        return JSONResponse(
            {"session_id": session.session_id, "base_url": f"/sessions/{session.session_id}/v1"},
            status_code=201,
        )

    @app.get("/sessions/{session_id}")
    async def get_session(session_id: str, request: Request) -> JSONResponse:
        gw = _gateway(request)
        try:
            return JSONResponse(gw.describe(gw.get_session(session_id)))
        except Refusal as r:
            return _error(r.status, r.message, r.code)

    @app.delete("/sessions/{session_id}")
    async def delete_session(session_id: str, request: Request) -> JSONResponse:
        try:
            return JSONResponse(_gateway(request).delete_session(session_id))
        except Refusal as r:
            return _error(r.status, r.message, r.code)

    @app.post("/sessions/{session_id}/v1/chat/completions")
    async def chat_completions(session_id: str, request: Request) -> Response:
        return _to_response(await _gateway(request).chat(session_id, await request.body()))

    @app.post("/admin/drain")
    async def drain(request: Request) -> JSONResponse:
        try:
            body = await _body(request, allow_empty=True)
        except Refusal as r:
            return _error(r.status, r.message, r.code)
        timeout = body.get("timeout_s", DEFAULT_DRAIN_TIMEOUT_S) if isinstance(body, dict) else None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            return _error(400, "timeout_s: expected a number >= 0")
        return JSONResponse(await _gateway(request).drain(float(timeout)))

    @app.get("/admin/drain")
    async def drain_status(request: Request) -> JSONResponse:
        return JSONResponse(_gateway(request).drain_status())

    @app.post("/admin/resume")
    async def resume(request: Request) -> JSONResponse:
        return JSONResponse(_gateway(request).resume())

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "draining" if _gateway(request).draining else "ok"})

    @app.get("/metrics")
    async def metrics(request: Request) -> PlainTextResponse:
        gw = _gateway(request)
        return PlainTextResponse(
            gw.metrics.render(sessions=len(gw.sessions), draining=gw.draining, in_flight=gw.in_flight)
        )

    return app
