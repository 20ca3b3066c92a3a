"""The gateway's refusals: one exception (``errors.Refusal``) carrying the HTTP status the client
receives, and why."""

from __future__ import annotations

from cua_stream.errors import Refusal

__all__ = ["Refusal", "bad_request"]


def bad_request(message: str) -> Refusal:
    return Refusal(400, message)
