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
- ``POST /admin/pause_generation`` {mode: abort|retract|in_place} / ``POST /admin/continue_generation``
  (SGLang's request and answer shapes): the trainer brackets a weight update that pauses the engine
  instead of draining. Under ``retract`` the calls the engine aborts are continued under the new
  weights, one record and one reply each (``retract``); the other modes need nothing of the gateway.
- ``GET /health`` (liveness: the process answers; with the last known engine state),
  ``GET /ready`` (readiness: 200 only while the engine answers its health check and the gateway is not
  draining), ``GET /metrics`` (Prometheus text). These three need no API key (probes and scrapers).

Every error is an OpenAI-shaped JSON body with a precise status; an unexpected exception is a JSON 500.
A chat call whose client disconnects is cancelled, and the engine is told to abort its generation.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from cua_stream.auth import OPEN_PATHS, bearer_token, matches
from cua_stream.gateway.openai_format import Reply, decode_body, error_body
from cua_stream.gateway.refusal import Refusal
from cua_stream.gateway.service import Gateway
from cua_stream.gateway.session import SessionSpec
from cua_stream.metrics import resident_memory

log = logging.getLogger(__name__)

DEFAULT_DRAIN_TIMEOUT_S = 60.0
PAUSE_MODES = ("abort", "retract", "in_place")
"""SGLang's ``PauseGenerationReqInput.mode`` values (its default is ``abort``)."""


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
    return decode_body(raw)


async def _until_disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _session_key_opens(request: Request, given: str | None) -> bool:
    """A session's own key opens its chat route (``/sessions/<id>/v1/...``) and nothing else."""
    parts = request.url.path.split("/")
    if given is None or len(parts) < 5 or parts[1] != "sessions" or parts[3] != "v1":
        return False
    session = _gateway(request).sessions.get(parts[2])
    return session is not None and matches(given, session.key)


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def create_app(
    gateway: Gateway | None = None,
    *,
    api_key: str | None = None,
    admin_api_key: str | None = None,
    lifespan: Any = None,
) -> FastAPI:
    """The app over ``gateway``, or over the one ``lifespan`` puts in ``app.state.gateway`` at start-up
    (the daemon does that, so the Kafka producer lives in the server's event loop)."""
    app = FastAPI(title="cua-stream session gateway", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.gateway = gateway

    def denied(request: Request) -> str | None:
        """Why ``request`` may not pass (None: it may)."""
        path = request.url.path
        given = bearer_token(request.headers.get("authorization", ""))
        if path.startswith("/admin/") and admin_api_key is not None:  # drain/resume: the admin key only
            return None if matches(given, admin_api_key) else "missing or wrong admin API key"
        if api_key is None or path in OPEN_PATHS:
            return None
        if matches(given, api_key, admin_api_key) or _session_key_opens(request, given):
            return None
        return "missing or wrong API key"

    @app.middleware("http")
    async def authorize(request: Request, call_next: Any) -> Response:
        if (why := denied(request)) is not None:
            return _error(401, f"{why} (Authorization: Bearer <key>)", "unauthorized")
        try:
            return await call_next(request)
        except Exception as e:  # a bug: answer it in the OpenAI shape, keep the connection usable
            log.exception("%s %s failed", request.method, request.url.path)
            return _error(500, f"internal error: {type(e).__name__}: {e}", "internal_error")

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
            {
                "session_id": session.session_id,
                "base_url": f"/sessions/{session.session_id}/v1",
                "session_key": session.key,
                "context_length": _gateway(request).context_length,
            },
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
        body = await request.body()
        reply: Reply | None = None
        async with anyio.create_task_group() as tg:

            async def serve() -> None:
                nonlocal reply
                reply = await _gateway(request).chat(session_id, body)
                tg.cancel_scope.cancel()

            async def watch() -> None:
                await _until_disconnected(request)
                tg.cancel_scope.cancel()  # the call is cancelled; the engine client aborts the generation

            tg.start_soon(serve)
            tg.start_soon(watch)
        if reply is None:  # the client is gone: nobody reads this
            return _error(499, "the client closed the request", "client_closed")
        return _to_response(reply)

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

    @app.post("/admin/pause_generation")
    async def pause_generation(request: Request) -> JSONResponse:
        try:
            body = await _body(request, allow_empty=True)
        except Refusal as r:
            return _error(r.status, r.message, r.code)
        mode = body.get("mode", "abort") if isinstance(body, dict) else None
        if mode not in PAUSE_MODES:
            return _error(400, f"mode: expected one of {', '.join(PAUSE_MODES)}, not {mode!r}")
        _gateway(request).pause_generation(mode)
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    @app.post("/admin/continue_generation")
    async def continue_generation(request: Request) -> JSONResponse:
        _gateway(request).continue_generation()
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        gw = _gateway(request)
        return JSONResponse({"status": "draining" if gw.draining else "ok", "engine": gw.engine_state})

    @app.get("/ready")
    async def ready(request: Request) -> JSONResponse:
        is_ready, detail = await _gateway(request).readiness()
        return JSONResponse({"ready": is_ready, **detail}, status_code=200 if is_ready else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> PlainTextResponse:
        gw = _gateway(request)
        lag = getattr(request.app.state, "loop_lag", None)  # the server's (absent in an app built bare)
        return PlainTextResponse(
            gw.metrics.render(
                sessions=len(gw.sessions),
                draining=gw.draining,
                in_flight=gw.in_flight,
                waiting=gw.engine_waiting(),
            )
            + (lag.render() if lag is not None else "")
            + resident_memory()
        )

    return app
