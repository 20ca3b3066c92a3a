"""HTTP clients for hundreds of concurrent episodes: many small connection pools instead of one big one.

httpcore's pool scans every connection it holds on each request it assigns: O(connections) per request,
O(n²) under load. One client with 512 connections kept the producer's event loop busy for seconds at a
time (``bench/producer_scale.py``: 23.7 s of a 34 s run in ``_assign_requests_to_connections``). Requests
are spread over clients of at most ``PER_CLIENT`` connections by a stable key (the episode), and every
client shares one TLS context (building one per client costs ~50 ms).
"""

from __future__ import annotations

import math
import zlib

import httpx

PER_CLIENT = 16
KEEPALIVE_S = 2.0
"""Idle pooled connections are dropped after this: below uvicorn's 5 s keep-alive, so a request is never
sent on a connection the server is closing (a session's close comes minutes after its open)."""


class ClientPool:
    def __init__(self, connections: int, *, timeout: httpx.Timeout | float = 60.0) -> None:
        tls = httpx.create_ssl_context()
        n = max(1, math.ceil(connections / PER_CLIENT))
        limits = httpx.Limits(max_connections=PER_CLIENT, keepalive_expiry=KEEPALIVE_S)
        self.clients = [httpx.AsyncClient(timeout=timeout, limits=limits, verify=tls) for _ in range(n)]

    def client(self, key: str) -> httpx.AsyncClient:
        return self.clients[zlib.crc32(key.encode()) % len(self.clients)]

    async def __aenter__(self) -> ClientPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in self.clients:
            await c.aclose()
