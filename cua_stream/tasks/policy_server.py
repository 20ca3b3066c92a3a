"""The scripted policies behind an OpenAI-compatible endpoint, so computer-1 runs them as it runs a model:
``POST /policies/{oracle|nothing|idle}/{task}/{seed}/v1/chat/completions`` (what LiteLLM sends to an
``api_base``). The task and seed in the path are the episode's: the oracle rebuilds the layout from them.

``cua-stream policies`` serves it; ``record-oracle`` points the gateway's ``teacher_url`` at it.
"""

from __future__ import annotations

import base64
import io
import time
import uuid
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from cua_stream.tasks.pages import TASKS, layout
from cua_stream.tasks.policies import do_nothing_action, idle_action, oracle_action, reply_text

POLICIES = ("oracle", "nothing", "idle")


def _replies(messages: list[dict[str, Any]]) -> list[str]:
    return [
        m["content"] for m in messages if m.get("role") == "assistant" and isinstance(m.get("content"), str)
    ]


def latest_screenshot(messages: list[dict[str, Any]]) -> np.ndarray | None:
    """The last image of the conversation as RGB pixels (None if there is none)."""
    from PIL import Image

    for message in reversed(messages):
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        for part in reversed(parts):
            url = (part.get("image_url") or {}).get("url", "") if isinstance(part, dict) else ""
            if url.startswith("data:"):
                data = base64.b64decode(url.split(",", 1)[1])
                return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return None


def create_app() -> FastAPI:
    app = FastAPI(title="cua-stream scripted policies", docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "policies": list(POLICIES), "tasks": list(TASKS)})

    @app.post("/policies/{policy}/{task}/{seed}/v1/chat/completions")
    async def complete(policy: str, task: str, seed: int, request: Request) -> JSONResponse:
        if policy not in POLICIES or task not in TASKS:
            return JSONResponse({"error": {"message": f"unknown policy {policy!r} or task {task!r}"}}, 404)
        body = await request.json()
        messages = body.get("messages") or []
        replies = _replies(messages)
        if policy == "nothing":
            action = do_nothing_action(replies)
        elif policy == "idle":
            action = idle_action(replies)
        else:
            action = oracle_action(layout(task, seed), replies, latest_screenshot(messages))
        content = reply_text(action)
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", policy),
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
