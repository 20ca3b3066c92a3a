"""Putting new weights on the engine: drain the gateway (calls in flight finish, new ones wait), load the
weights with SGLang's ``/update_weights_from_disk`` under their version, resume the gateway."""

from __future__ import annotations

from pathlib import Path

import httpx

from cua_stream.errors import EngineUnavailable


async def push_weights(
    http: httpx.AsyncClient,
    *,
    engine_url: str,
    gateway_url: str,
    weights: Path,
    version: int,
    drain_timeout_s: float = 60.0,
) -> None:
    if gateway_url:
        await http.post(f"{gateway_url}/admin/drain", json={"timeout_s": drain_timeout_s})
    try:
        r = await http.post(
            f"{engine_url}/update_weights_from_disk",
            json={"model_path": str(weights), "weight_version": str(version)},
            timeout=600,
        )
        if r.status_code != 200 or not r.json().get("success"):
            raise EngineUnavailable(f"the engine refused weights v{version}: {r.status_code} {r.text[:300]}")
    finally:
        if gateway_url:
            await http.post(f"{gateway_url}/admin/resume")


async def engine_version(http: httpx.AsyncClient, engine_url: str) -> str | None:
    """The weight version the engine serves (None if it cannot say)."""
    try:
        r = await http.get(f"{engine_url}/get_model_info", timeout=10)
    except httpx.HTTPError:
        return None
    return str(r.json().get("weight_version")) if r.status_code == 200 else None
