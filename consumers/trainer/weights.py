"""Putting new weights on the engine: drain the gateway (calls in flight finish, new ones wait), load the
weights with SGLang's ``/update_weights_from_disk`` under their version, resume the gateway.

An engine that cannot be reached is retried with backoff, then reported (``EngineUnreachable``): the
trainer goes on and loads the weights once the engine answers again (the checkpoint holds them). An
engine that answers but refuses the weights (a wrong key, a bad path) is an ``EngineUnavailable`` that
stops the trainer with one line. A gateway that cannot be reached is not drained (it has no calls in flight to protect) and the
update goes ahead, with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import httpx

from cua_stream.auth import bearer_headers
from cua_stream.bus.connect import backoff_s
from cua_stream.errors import EngineUnavailable, EngineUnreachable

log = logging.getLogger(__name__)

ATTEMPTS = 5


async def push_weights(
    http: httpx.AsyncClient,
    *,
    engine_url: str,
    gateway_url: str,
    weights: Path,
    version: int,
    drain_timeout_s: float = 60.0,
    engine_key: object | None = None,
    gateway_key: object | None = None,
) -> None:
    """Load ``weights`` on the engine as ``version``, the gateway drained around it (its admin routes
    and the engine's weight route take the admin keys, when those services have them)."""
    gateway_headers = bearer_headers(gateway_key)
    drained = bool(gateway_url) and await _gateway(
        http, f"{gateway_url}/admin/drain", {"timeout_s": drain_timeout_s}, gateway_headers
    )
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                r = await http.post(
                    f"{engine_url}/update_weights_from_disk",
                    json={"model_path": str(weights), "weight_version": str(version)},
                    headers=bearer_headers(engine_key),
                    timeout=600,
                )
                break
            except httpx.TransportError as e:
                if attempt == ATTEMPTS:
                    raise EngineUnreachable(
                        f"the engine at {engine_url} could not be reached to load weights v{version} "
                        f"({type(e).__name__}); they are checkpointed and load once it answers"
                    ) from None
                await anyio.sleep(backoff_s(attempt))
        if r.status_code != 200 or not r.json().get("success"):
            raise EngineUnavailable(f"the engine refused weights v{version}: {r.status_code} {r.text[:300]}")
    finally:
        if drained:
            with anyio.CancelScope(shield=True):
                await _gateway(http, f"{gateway_url}/admin/resume", {}, gateway_headers)


async def _gateway(
    http: httpx.AsyncClient, url: str, body: dict[str, float], headers: dict[str, str]
) -> bool:
    """POST to a gateway admin route; False (with a warning) if the gateway cannot be reached."""
    try:
        r = await http.post(url, json=body, headers=headers, timeout=120)
    except httpx.TransportError as e:
        log.warning("gateway %s unreachable (%s): weight update goes on without it", url, type(e).__name__)
        return False
    return r.status_code == 200


async def engine_version(http: httpx.AsyncClient, engine_url: str, key: object | None = None) -> str | None:
    """The weight version the engine serves (None if it cannot say)."""
    try:
        r = await http.get(f"{engine_url}/get_model_info", headers=bearer_headers(key), timeout=10)
    except httpx.HTTPError:
        return None
    return str(r.json().get("weight_version")) if r.status_code == 200 else None


ENGINE_CHECK_S = 5.0
"""How often the trainer asks the engine which weights it serves: an engine restarted from its launch
weights (a crash, a rescheduled pod) gets the current ones back within this long, instead of serving the
base policy until the next step (its rollouts would all be dropped as stale)."""


class EngineWeights:
    """The trainer's side of the engine: load a version's weights on it (the gateway drained around the
    load), and put the current ones back on an engine that restarted with others."""

    def __init__(
        self,
        engine_url: str,
        *,
        gateway_url: str = "",
        drain_timeout_s: float = 60.0,
        engine_key: object | None = None,
        gateway_key: object | None = None,
    ) -> None:
        self.engine_url, self.gateway_url = engine_url, gateway_url
        self.drain_timeout_s = drain_timeout_s
        self.engine_key, self.gateway_key = engine_key, gateway_key

    async def served(self, http: httpx.AsyncClient) -> str | None:
        """The version the engine serves (None: no engine configured, or down)."""
        if not self.engine_url:
            return None
        return await engine_version(http, self.engine_url, self.engine_key)

    async def push(self, http: httpx.AsyncClient, weights: Path, version: int) -> None:
        if not self.engine_url:
            return
        await push_weights(
            http,
            engine_url=self.engine_url,
            gateway_url=self.gateway_url,
            weights=weights,
            version=version,
            drain_timeout_s=self.drain_timeout_s,
            engine_key=self.engine_key,
            gateway_key=self.gateway_key,
        )

    async def restore(self, http: httpx.AsyncClient, weights: Path, version: int) -> None:
        """Load ``version`` again on an engine that serves others (it restarted); a refusal is logged and
        tried again at the next check, never fatal here."""
        served = await self.served(http)
        if served is None or served == str(version):  # down (it will be back), or up to date
            return
        log.warning(
            "the engine serves weights %s, not v%d (it restarted?): loading v%d", served, version, version
        )
        try:
            await self.push(http, weights, version)
        except EngineUnavailable as e:
            log.warning("%s; trying again in %.0fs", e, ENGINE_CHECK_S)
