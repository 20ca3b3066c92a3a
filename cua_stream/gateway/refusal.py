"""The gateway's refusals: one exception carrying the HTTP status the client receives, and why."""

from __future__ import annotations


class Refusal(Exception):
    """A request the gateway will not serve. ``status`` is the HTTP code; ``message`` names the field or
    the values involved. Refusals are answered, counted in the session's statuses, and never recorded."""

    def __init__(self, status: int, message: str, *, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def bad_request(message: str) -> Refusal:
    return Refusal(400, message)
