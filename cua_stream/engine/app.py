"""The reference engine's HTTP app: SGLang's native endpoints and response shapes.

Requests in flight are interleaved a token at a time by the scheduler (``scheduler.py``). A weight
update waits for them to finish unless generation is paused, in which case it lands between two decode
steps and each request reports two version spans, as SGLang does under
``pause_generation(mode=in_place)``. ``/abort_request`` and a client that disconnects end a request at
its next step. Every error is a JSON body with its status; an unexpected one is a JSON 500 (never an
exception that reaches the server, which would close a keep-alive connection under the next request).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from typing import Any

import anyio.to_thread
import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from cua_stream.auth import bearer_token, matches
from cua_stream.engine.config import EngineConfig
from cua_stream.engine.params import SamplingParams
from cua_stream.engine.runner import Generation, ModelRunner
from cua_stream.engine.scheduler import Scheduler
from cua_stream.errors import EngineInputError, SamplingError

log = logging.getLogger(__name__)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


class EngineService:
    """Request handling around one ModelRunner and its scheduler."""

    def __init__(self, config: EngineConfig, runner: ModelRunner) -> None:
        self.config = config
        self.runner = runner
        self.scheduler = Scheduler(
            runner, max_running=config.max_running_requests, step_latency_s=config.step_latency_s
        )
        self._admit = asyncio.Event()
        self._admit.set()
        self.recent: deque[dict[str, Any]] = deque(maxlen=max(config.debug_history, 1))

    async def generate(self, body: dict[str, Any], request: Request | None = None) -> JSONResponse:
        parsed = self._parse(body)
        if isinstance(parsed, JSONResponse):
            return parsed
        input_ids, image_data, params, return_logprob, score_from = parsed
        runner = self.runner
        rid = str(body.get("rid") or uuid.uuid4().hex)
        try:
            pixels = await anyio.to_thread.run_sync(runner.pixel_inputs, image_data)
            runner.check_image_tokens(input_ids, pixels)
        except EngineInputError as e:
            return _error(400, str(e))
        await self._admit.wait()
        started = time.perf_counter()
        try:
            job = runner.new_job(rid, input_ids, pixels, params, score_from=score_from)
            future = self.scheduler.submit(job)
        except (EngineInputError, ValueError) as e:
            return _error(400, str(e))
        try:
            gen = await self._wait(future, rid, request)
        except Exception as e:  # the step failed inside the model (the scheduler logged it)
            return _error(500, f"generation failed: {type(e).__name__}: {e}")
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": gen.finish_reason,
            "prompt_tokens": len(input_ids),
            "completion_tokens": len(gen.output_ids),
            "cached_tokens": 0,
            "weight_version": gen.version_spans[-1]["version"]
            if gen.version_spans
            else runner.weight_version,
            "weight_versions": gen.version_spans,
            "e2e_latency": time.perf_counter() - started,
        }
        if return_logprob:
            meta["output_token_logprobs"] = [
                [lp, tok, None] for lp, tok in zip(gen.logprobs, gen.output_ids, strict=True)
            ]
        if score_from is not None:  # SGLang's: [logprob, id, text] per input token from it, the first null
            meta["input_token_logprobs"] = [
                [lp, tok, None] for lp, tok in zip(gen.input_logprobs, input_ids[score_from:], strict=True)
            ]
            meta["weight_version"] = gen.version
        if self.config.debug_history:
            self.recent.append(
                {
                    "rid": meta["id"],
                    "input_ids": input_ids,
                    "output_ids": gen.output_ids,
                    "image_grid_thw": pixels.grid(),
                    "pixel_values_sha256": pixels.digest(),
                    "sampling_seed": job.seed,
                }
            )
        return JSONResponse(
            {"text": runner.text_of(gen, params), "output_ids": gen.output_ids, "meta_info": meta}
        )

    async def _wait(
        self, future: asyncio.Future[Generation], rid: str, request: Request | None
    ) -> Generation:
        """The generation, aborted at its next step if the client disconnects or this handler is
        cancelled first (an HTTP client that gives up frees the engine, as SGLang does)."""

        async def abort_on_disconnect() -> None:
            assert request is not None
            while (await request.receive())["type"] != "http.disconnect":
                pass
            self.scheduler.abort(rid, "the client disconnected")

        try:
            async with anyio.create_task_group() as tg:
                if request is not None:
                    tg.start_soon(abort_on_disconnect)
                gen = await future
                tg.cancel_scope.cancel()
            return gen
        except anyio.get_cancelled_exc_class():
            self.scheduler.abort(rid, "the request was cancelled")
            raise

    def _parse(
        self, body: dict[str, Any]
    ) -> tuple[list[int], list[str], SamplingParams, bool, int | None] | JSONResponse:
        if body.get("stream"):
            return _error(400, "stream: the reference engine answers non-streaming requests only")
        input_ids = body.get("input_ids")
        if input_ids is None and isinstance(body.get("text"), str):
            input_ids = self.runner.tokenizer.encode(body["text"], add_special_tokens=False)
        if not isinstance(input_ids, list) or not input_ids or not all(isinstance(t, int) for t in input_ids):
            return _error(
                400, "input_ids: expected one non-empty list of token ids (batches are not supported)"
            )
        vocab = self.runner.model.config.text_config.vocab_size
        if any(t < 0 or t >= vocab for t in input_ids):
            return _error(400, f"input_ids: ids must lie in [0, {vocab})")
        image_data = body.get("image_data") or []
        if isinstance(image_data, str):
            image_data = [image_data]
        if not isinstance(image_data, list) or not all(isinstance(i, str) for i in image_data):
            return _error(400, "image_data: expected a string or a list of strings")
        if body.get("top_logprobs_num", 0) not in (0, None):
            return _error(400, "top_logprobs_num: only the chosen tokens' logprobs are supported")
        start = body.get("logprob_start_len", -1)
        if start is None:
            start = -1
        try:
            params = SamplingParams.from_request(body.get("sampling_params"))
        except SamplingError as e:
            return _error(400, str(e))
        return_logprob = bool(body.get("return_logprob"))
        score_from = None
        if start != -1:  # input logprobs: a forced completion scored (the runner checks the rest)
            if not (isinstance(start, int) and return_logprob):
                return _error(400, "logprob_start_len: input logprobs need return_logprob (and an integer)")
            score_from = start
        return input_ids, image_data, params, return_logprob, score_from

    async def update_weights_from_disk(self, body: dict[str, Any]) -> JSONResponse:
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            return JSONResponse({"success": False, "message": "model_path is required"}, status_code=400)
        raw_version = body.get("weight_version")  # SGLang labels are strings; a trainer may send an int
        version = None if raw_version is None else str(raw_version)
        paused = self.runner.gate.paused
        running, _ = self.scheduler.load
        self._admit.clear()  # new requests wait for the new weights
        try:
            if not paused:  # let the requests in flight finish on the old weights
                await anyio.to_thread.run_sync(self.scheduler.wait_idle)
            # paused: the requests in flight are frozen between steps, and the swap lands under them
            await anyio.to_thread.run_sync(self.runner.load_weights, path, version)
        except (OSError, ValueError) as e:
            return JSONResponse({"success": False, "message": f"{type(e).__name__}: {e}"}, status_code=400)
        finally:
            self._admit.set()
        return JSONResponse(
            {
                "success": True,
                "message": f"loaded {path} as weight version {self.runner.weight_version}",
                "num_paused_requests": running if paused else 0,
            }
        )

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.runner.model_path,
            "tokenizer_path": self.config.model_path,
            "served_model_name": self.config.served_model_name or self.config.model_path,
            "is_generation": True,
            "has_image_understanding": True,
            "preferred_sampling_params": None,
            "weight_version": self.runner.weight_version,
            "load_format": "auto",
            "reasoning_parser": None,
        }


ADMIN_PATHS = frozenset({"/update_weights_from_disk", "/pause_generation", "/continue_generation"})
"""What changes the served policy or stops serving: the admin key's alone, when one is set."""


def create_app(config: EngineConfig, runner: ModelRunner) -> FastAPI:
    service = EngineService(config, runner)
    app = FastAPI(title="cua-stream reference engine", docs_url=None, redoc_url=None)
    app.state.service = service

    api_key, admin_key = (
        k.reveal() if k is not None else None for k in (config.api_key, config.admin_api_key)
    )

    @app.middleware("http")
    async def json_errors(request: Request, call_next: Any) -> Response:
        given = bearer_token(request.headers.get("authorization", ""))
        if request.url.path in ADMIN_PATHS and admin_key is not None:
            if not matches(given, admin_key):
                return _error(401, "missing or wrong admin API key (Authorization: Bearer <key>)")
        elif api_key is not None and request.url.path != "/health" and not matches(given, api_key, admin_key):
            return _error(401, "missing or wrong API key (Authorization: Bearer <key>)")
        try:
            return await call_next(request)
        except Exception as e:  # a bug: answer it in JSON and keep the connection usable
            log.exception("%s %s failed", request.method, request.url.path)
            return _error(500, f"internal error: {type(e).__name__}: {e}")

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> JSONResponse:
        body = await _json_body(request)
        return body if isinstance(body, JSONResponse) else await service.generate(body, request)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> JSONResponse:
        body = await _json_body(request)
        if isinstance(body, JSONResponse):
            return body
        if body.get("abort_all") is True:
            service.scheduler.abort_all("abort_request(abort_all)")
        elif isinstance(body.get("rid"), str):
            service.scheduler.abort(body["rid"], "abort_request")
        else:
            return _error(400, "rid: expected a string (or abort_all: true)")
        return JSONResponse({})

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> JSONResponse:
        body = await _json_body(request)
        return body if isinstance(body, JSONResponse) else await service.update_weights_from_disk(body)

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> JSONResponse:
        body = await _json_body(request, allow_empty=True)
        if isinstance(body, JSONResponse):
            return body
        try:
            runner.gate.pause(str(body.get("mode", "abort")))
        except EngineInputError as e:
            return _error(400, str(e))
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    @app.post("/continue_generation")
    async def continue_generation(request: Request) -> JSONResponse:
        body = await _json_body(request, allow_empty=True)  # SGLang's ContinueGenerationReqInput: no fields
        if isinstance(body, JSONResponse):
            return body
        runner.gate.resume()
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    @app.get("/health")
    async def health() -> JSONResponse:
        if not service.scheduler.alive:
            return _error(503, f"the scheduler stopped: {service.scheduler.error!r}")
        running, waiting = service.scheduler.load
        return JSONResponse({"running_requests": running, "waiting_requests": waiting})

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info() -> JSONResponse:
        return JSONResponse(service.model_info())

    @app.get("/debug/scheduler")
    async def debug_scheduler() -> JSONResponse:
        """Reference-engine extension (not SGLang): the scheduler's busy seconds (decode rounds that
        advanced a request) and slot seconds (those rounds times the requests each advanced), since start;
        benchmarks read the engine's busy fraction from them."""
        scheduler = service.scheduler
        return JSONResponse({"busy_s": scheduler.busy_s, "slot_s": scheduler.slot_s})

    @app.get("/debug/requests")
    async def debug_requests() -> JSONResponse:
        """Reference-engine extension (not SGLang): the last ``debug_history`` requests, oldest first."""
        if not config.debug_history:
            return _error(404, "debug history is off (engine.debug_history = 0)")
        return JSONResponse(list(service.recent))

    return app


async def _json_body(request: Request, *, allow_empty: bool = False) -> dict[str, Any] | JSONResponse:
    raw = await request.body()
    if not raw and allow_empty:
        return {}
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as e:
        return _error(400, f"request body is not valid JSON: {e or 'nested too deeply'}")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object")
    return body
