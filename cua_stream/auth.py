"""Bearer credentials for the HTTP services (gateway, engine): which key a route needs, and a constant-time
check. Pure. Probes and scrapers carry no key (``/health``, ``/ready``, ``/metrics`` are open)."""

from __future__ import annotations

import hmac
import re
import secrets

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})

SESSION_KEY_PREFIX = "cuask_"
"""Every per-episode session key starts with this (then 32 URL-safe characters): like the prefixes of
GitHub or Slack tokens, it lets a secret scanner find a leaked key in logs, topics and files without
knowing the key (the chaos run's security check scans for it)."""
SESSION_KEY_PATTERN = re.compile(re.escape(SESSION_KEY_PREFIX).encode() + rb"[A-Za-z0-9_-]{32}")
"""The prefix, then ``token_urlsafe(24)``: 24 random bytes in 32 URL-safe base64 characters."""


def new_session_key() -> str:
    return SESSION_KEY_PREFIX + secrets.token_urlsafe(24)


def session_keys_in(data: bytes) -> list[bytes]:
    """The session keys found in ``data`` (a log, a record, a page)."""
    return SESSION_KEY_PATTERN.findall(data)


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive, RFC 7235);
    None for any other scheme or a bare token."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def matches(given: str | None, *keys: str | None) -> bool:
    """``given`` equals one of the configured ``keys`` (compared in constant time)."""
    return given is not None and any(
        key is not None and hmac.compare_digest(given.encode(), key.encode()) for key in keys
    )


def bearer_headers(key: object | None) -> dict[str, str]:
    """The Authorization header for ``key`` (a ``Secret`` or a string); none without a key."""
    if key is None:
        return {}
    reveal = getattr(key, "reveal", None)
    return {"Authorization": f"Bearer {reveal() if reveal else key}"}
