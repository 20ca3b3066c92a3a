"""OpenAI chat-completions response shapes: the JSON body, the one-chunk stream, and error bodies."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cua_stream.errors import Refusal

_json = msgspec.json.Encoder()

# OpenAI has no "abort"; the gateway never answers 200 for an aborted generation anyway.
_FINISH = {"stop": "stop", "length": "length"}


def completion_body(
    *, call_id: str, model: str, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": _FINISH.get(finish_reason, finish_reason),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_body(completion: dict[str, Any]) -> bytes:
    """A non-streamed reply re-emitted as one SSE chunk plus ``[DONE]`` (the engine call is not streamed)."""
    choice = completion["choices"][0]
    chunk = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": choice["message"]["content"]},
                "finish_reason": choice["finish_reason"],
            }
        ],
        "usage": completion["usage"],
    }
    return b"data: " + _json.encode(chunk) + b"\n\ndata: [DONE]\n\n"


def decode_body(raw: bytes) -> Any:
    """A request's JSON body (Refusal 400 saying why it is not one: bad JSON, nested too deeply)."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise Refusal(400, f"request body is not valid JSON: {e}") from None
    except RecursionError:
        raise Refusal(400, "request body is nested too deeply") from None


def error_body(status: int, message: str, code: str = "invalid_request") -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


@dataclass
class Reply:
    """An HTTP answer, independent of the web framework."""

    status: int
    body: Any = None
    raw: bytes | None = None
    media_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def refusal_reply(r: Refusal) -> Reply:
    """A refusal in the OpenAI error shape (a 503 says when to retry)."""
    headers = {"retry-after": "1"} if r.status == 503 else {}
    return Reply(r.status, error_body(r.status, r.message, r.code), headers=headers)
