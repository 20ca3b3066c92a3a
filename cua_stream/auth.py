"""Bearer credentials for the HTTP services (gateway, engine): which key a route needs, and a constant-time
check. Pure. Probes and scrapers carry no key (``/health``, ``/ready``, ``/metrics`` are open)."""

from __future__ import annotations

import hmac

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})


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
