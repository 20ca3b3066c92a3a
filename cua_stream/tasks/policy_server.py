"""The scripted policies behind an OpenAI-compatible endpoint, so computer-1 runs them as it runs a model:
``POST /policies/{oracle|nothing|idle|random}/{task}/{seed}/v1/chat/completions`` (what LiteLLM sends to
an ``api_base``). The task and seed in the path are the episode's (a task name may hold ``/``:
``miniwob/click-test``; the seed is the last segment). The oracle of a bundled task rebuilds the layout
from them; the oracle of a MiniWoB++ task is its teacher (``cua_stream.tasks.miniwob.teacher``), which
loads the same page and seed in a shadow page of its own (a headless Chromium the server starts on the
first such request, and stops with itself).

``cua-stream policies`` serves it; ``record-oracle`` points the gateway's ``teacher_url`` at it. A server
too: a request that is not a chat completion gets a 400 in the gateway's JSON error shape saying why
(bad JSON, a body or ``messages`` of the wrong shape, an image that is not strict base64, not an image,
truncated or over the pixel limit: the project's one image rule, ``cua_stream.image_bytes``), never a
plain-text 500. Screenshots are decoded in worker threads, ``DECODES_AT_ONCE`` at a time, so ``/health``
answers meanwhile and memory stays under that many images at the pixel limit (about 340 MB each,
decoded and converted); up to ``DECODES_WAITING`` more wait their turn, and beyond that a request is
refused with 503 and Retry-After at once. Before, each image's pixels were bounded but not how many
were decoded at once: four concurrent 4 KB PNGs just under the limit took 1.43 GB and ``/health`` 3 s.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from cua_stream.errors import BrowserError, ImageDataError, MiniwobMissing, Refusal
from cua_stream.gateway.openai_format import decode_body, error_body
from cua_stream.image_bytes import b64decode_strict, check_pixels, data_url_payload
from cua_stream.tasks.miniwob import PREFIX, is_miniwob
from cua_stream.tasks.miniwob.shadow import Shadows
from cua_stream.tasks.miniwob.suite import installed_suite
from cua_stream.tasks.miniwob.teacher import teacher_action, teaches
from cua_stream.tasks.pages import TASKS, layout
from cua_stream.tasks.policies import (
    do_nothing_action,
    idle_action,
    oracle_action,
    random_action,
    reply_text,
)

POLICIES = ("oracle", "nothing", "idle", "random")
PLAYS = (
    "every policy plays the bundled tasks and the MiniWoB++ suite, but the oracle only the MiniWoB++ "
    "tasks its teacher solves"
)
DECODES_AT_ONCE = 2
DECODES_WAITING = 32
"""Screenshots waiting for a decode slot (each request holds its body meanwhile); more are refused."""
RETRY_AFTER_S = 1


class Busy(Exception):
    """Every decode slot and waiting place is taken: the request is refused (503, Retry-After)."""


class DecodeGate:
    """Decodes screenshots in worker threads, ``at_once`` at a time, with at most ``waiting`` more queued
    for a slot (``Busy`` beyond: a queue without end would hold every waiting request's body)."""

    def __init__(self, at_once: int = DECODES_AT_ONCE, waiting: int = DECODES_WAITING) -> None:
        self.at_once, self.waiting = at_once, waiting
        self.slots = anyio.CapacityLimiter(at_once)
        self.admitted = 0
        """Requests decoding or waiting to (at most ``at_once + waiting``)."""

    async def decode(self, url: str) -> np.ndarray:
        if self.admitted >= self.at_once + self.waiting:
            raise Busy(f"{self.at_once} screenshots are being decoded and {self.waiting} wait; try later")
        self.admitted += 1  # before any await: a burst cannot slip past the bound
        try:
            return await anyio.to_thread.run_sync(decode_screenshot, url, limiter=self.slots)
        finally:
            self.admitted -= 1


def chat_messages(body: Any) -> list[dict[str, Any]]:
    """The request's ``messages``, checked to be a list of objects (Refusal 400 otherwise)."""
    if not isinstance(body, dict):
        raise Refusal(400, f"request body must be a JSON object, not {type(body).__name__}")
    messages = body.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise Refusal(400, "messages must be a list of message objects")
    return messages


def _replies(messages: list[dict[str, Any]]) -> list[str]:
    return [
        m["content"] for m in messages if m.get("role") == "assistant" and isinstance(m.get("content"), str)
    ]


def latest_image_url(messages: list[dict[str, Any]]) -> str | None:
    """The data URL of the conversation's last image (None if there is none)."""
    for message in reversed(messages):
        content = message.get("content")
        for part in reversed(content if isinstance(content, list) else []):
            image = part.get("image_url") if isinstance(part, dict) else None
            url = image.get("url") if isinstance(image, dict) else None
            if isinstance(url, str) and url.startswith("data:"):
                return url
    return None


def decode_screenshot(url: str) -> np.ndarray:
    """RGB pixels of a data URL: strict base64, the size checked from the header before any pixel is
    decoded (a 9.9 KB PNG can claim 9000x9000), then decoded whole. ImageDataError saying why not."""
    from PIL import Image

    data = b64decode_strict(data_url_payload(url))
    try:
        image = Image.open(io.BytesIO(data))
        check_pixels(image.width, image.height)
        return np.asarray(image.convert("RGB"))
    except ImageDataError:
        raise
    except Exception as e:  # untrusted bytes: any decoder failure is the request's fault
        raise ImageDataError(f"cannot decode the image ({type(e).__name__}: {e})") from None


def latest_screenshot(messages: list[dict[str, Any]]) -> np.ndarray | None:
    """The last image of the conversation as RGB pixels (None if there is none)."""
    url = latest_image_url(messages)
    return None if url is None else decode_screenshot(url)


def _error(status: int, message: str, code: str = "invalid_request") -> JSONResponse:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    return JSONResponse(error_body(status, message, code), status_code=status, headers=headers)


def episode_of(instance: str) -> tuple[str, int] | None:
    """``<task>/<seed>`` (the task may hold ``/``) as its task and seed; None if the last segment is not a
    seed. Pure."""
    task, _, seed = instance.rpartition("/")
    if not task or not seed.isdigit() or len(seed) > 20:
        return None
    return task, int(seed)


def plays(policy: str, task: str) -> bool:
    """Whether ``policy`` plays ``task``: every policy the bundled tasks; the oracle the MiniWoB++ tasks its
    teacher solves, the others any task of the suite (they ignore the page). MiniwobMissing: the package
    is not installed here."""
    if policy not in POLICIES:
        return False
    if task in TASKS:
        return True
    if not is_miniwob(task) or task.removeprefix(PREFIX) not in installed_suite().names:
        return False
    return teaches(task) if policy == "oracle" else True


def create_app(decodes: DecodeGate | None = None) -> FastAPI:
    """``decodes``: how many screenshots are decoded at once and may wait (``DecodeGate``'s defaults)."""
    shadows = Shadows()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            await tg.start(shadows.run)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await shadows.aclose()

    app = FastAPI(title="cua-stream scripted policies", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.decodes = gate = decodes or DecodeGate()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        return _error(500, f"internal error ({type(error).__name__}: {error})")

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "policies": list(POLICIES), "tasks": list(TASKS)})

    @app.post("/policies/{policy}/{instance:path}/v1/chat/completions")
    async def complete(policy: str, instance: str, request: Request) -> JSONResponse:
        episode = episode_of(instance)
        if episode is None:
            return _error(404, f"{instance!r} is not <task>/<seed>")
        task, seed = episode
        try:
            if not plays(policy, task):
                return _error(
                    404, f"unknown policy {policy!r} or task {task!r}, or {policy} does not play it"
                )
            body = decode_body(await request.body())
            messages = chat_messages(body)
            replies = _replies(messages)
            if policy == "nothing":
                action = do_nothing_action(replies)
            elif policy == "idle":
                action = idle_action(replies)
            elif policy == "random":
                action = random_action(task, seed, replies)
            else:
                url = latest_image_url(messages)
                pixels = None if url is None else await gate.decode(url)
                if task in TASKS:
                    action = oracle_action(layout(task, seed), replies, pixels)
                else:
                    action = await teacher_action(shadows, task, seed, replies, messages, pixels)
        except Refusal as r:
            return _error(r.status, r.message)
        except ImageDataError as e:
            return _error(400, f"image_url: {e}")
        except Busy as e:
            return _error(503, str(e), code="busy")
        except (BrowserError, MiniwobMissing) as e:  # the teacher's shadow pages cannot run here
            return _error(503, f"the teacher's shadow page: {e}", code="teacher_unavailable")
        content = reply_text(action)
        model = body.get("model")
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model if isinstance(model, str) else policy,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": len(content) // 4, "total_tokens": 0},
            }
        )

    return app
