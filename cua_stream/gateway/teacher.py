"""A session's teacher: forced completions for recording demonstrations through the real path.

A session opened with ``teacher`` does not sample its replies: the gateway asks the teacher (an
OpenAI-compatible chat endpoint under the gateway's ``teacher_url``, e.g. the bundled tasks' oracle)
for the reply text, tokenizes it as the policy's completion (the reply's ids, then the end-of-turn
token), and has the engine *score* those ids instead of sampling (``max_new_tokens=0`` with input
logprobs). The record is then a call like any other: the same prompt rendering, images, chat
template and parent/child ids, with the policy's logprob of each forced token. So a demonstration is
exactly what the trainer later reads for a sampled turn, and SFT trains on the token layout GRPO does.

Only names under the configured ``teacher_url`` are reachable (a session names a path, never a host).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import httpx
import msgspec

from cua_stream.gateway.refusal import Refusal

TEACHER_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}){0,7}")
"""A path under ``teacher_url``: URL-safe segments, never a dot segment (``..`` would climb out)."""


class Teacher(Protocol):
    async def reply(self, name: str, messages: list[Any] | msgspec.Raw) -> str:
        """The teacher's reply text to the conversation ``messages`` (OpenAI format: decoded, or the JSON
        text of the array as the client sent it)."""
        ...


class HttpTeacher:
    """A teacher behind ``{teacher_url}/{name}/v1/chat/completions``."""

    def __init__(self, base_url: str, *, timeout_s: float = 60.0) -> None:
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def reply(self, name: str, messages: list[Any] | msgspec.Raw) -> str:
        # msgspec writes a Raw's bytes as they are: the client's messages reach the teacher undecoded
        body = msgspec.json.encode({"model": name, "messages": messages})
        try:
            r = await self._http.post(
                f"/{name}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as e:
            raise Refusal(
                503, f"the teacher is unreachable ({type(e).__name__})", code="teacher_unavailable"
            ) from None
        if r.status_code != 200:
            raise Refusal(502, f"the teacher answered {r.status_code}: {r.text[:300]}", code="teacher_failed")
        try:
            content = r.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str) or not content:
            raise Refusal(502, "the teacher's reply has no message content", code="teacher_failed")
        return content
