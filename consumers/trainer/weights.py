"""Putting new weights on the engine, in one of three ways (``trainer.weight_update``):

- ``drain``: the gateway is drained (calls in flight finish, new ones wait), the weights are loaded
  with SGLang's ``/update_weights_from_disk`` under their version, the gateway resumes. Every call is
  sampled by one version; the engine idles for the longest generation in flight at every update.
- ``in_place``: the engine is paused between two decode steps (SGLang's ``/pause_generation``
  ``{"mode": "in_place"}``), the weights load under the calls in flight, ``/continue_generation``: those
  calls finish under the new weights, their tokens stamped with both versions.
- ``retract``: the gateway is told (``/admin/pause_generation {"mode": "retract"}``), the engine is
  paused with ``{"mode": "abort"}`` (every generation in flight returns what it has), the weights load,
  the engine continues, the gateway is told (``/admin/continue_generation``). The gateway sends each
  aborted call again with its tokens so far as a forced prefix, under the new weights, and records
  one call with per-token versions; the agent sees one reply.

An engine that cannot be reached is retried with backoff, then reported (``EngineUnreachable``): the
trainer goes on and loads the weights once the engine answers again (the checkpoint holds them). An
engine that answers but refuses the weights (a wrong key, a bad path) is an ``EngineUnavailable`` that
stops the trainer with one line. A paused engine is always continued, the load failed or not. A gateway
that cannot be reached is not drained (it has no calls in flight to protect) and the update goes ahead,
with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import httpx

from cua_stream.auth import bearer_headers
from cua_stream.bus.connect import backoff_s
from cua_stream.errors import EngineUnavailable, EngineUnreachable

log = logging.getLogger(__name__)

ATTEMPTS = 5

WEIGHT_UPDATE_MODES = ("drain", "in_place", "retract")
"""``trainer.weight_update``'s values (see the module's docstring)."""

ENGINE_PAUSE_MODE = {"in_place": "in_place", "retract": "abort"}
"""The engine's ``/pause_generation`` mode for each pausing update mode: a retraction aborts the
engine's generations (the gateway continues them), SGLang's own ``retract`` would keep them inside."""


async def push_weights(
    http: httpx.AsyncClient,
    *,
    engine_url: str,
    gateway_url: str,
    weights: Path,
    version: int,
    mode: str = "drain",
    drain_timeout_s: float = 60.0,
    engine_key: object | None = None,
    gateway_key: object | None = None,
) -> None:
    """Load ``weights`` on the engine as ``version`` in ``mode`` (its admin routes and the engine's
    weight route take the admin keys, when those services have them)."""
    if mode not in WEIGHT_UPDATE_MODES:
        raise ValueError(f"weight update mode {mode!r}: expected one of {', '.join(WEIGHT_UPDATE_MODES)}")
    gateway_headers = bearer_headers(gateway_key)
    engine_headers = bearer_headers(engine_key)
    if mode == "drain":
        opened = bool(gateway_url) and await _gateway(
            http, f"{gateway_url}/admin/drain", {"timeout_s": drain_timeout_s}, gateway_headers
        )
        close = f"{gateway_url}/admin/resume"
    else:
        opened = (
            mode == "retract"
            and bool(gateway_url)
            and await _gateway(
                http, f"{gateway_url}/admin/pause_generation", {"mode": "retract"}, gateway_headers
            )
        )
        close = f"{gateway_url}/admin/continue_generation"
    try:
        if mode == "drain":
            await _load(http, engine_url, weights, version, engine_headers)
        else:
            await _paused_load(http, engine_url, weights, version, ENGINE_PAUSE_MODE[mode], engine_headers)
    finally:
        if opened:
            with anyio.CancelScope(shield=True):
                await _gateway(http, close, {}, gateway_headers)


async def _paused_load(
    http: httpx.AsyncClient,
    engine_url: str,
    weights: Path,
    version: int,
    pause_mode: str,
    headers: dict[str, str],
) -> None:
    """Pause the engine in ``pause_mode``, load, and continue it (also when the load failed)."""
    r = await _engine_post(http, f"{engine_url}/pause_generation", {"mode": pause_mode}, headers, version)
    if r.status_code != 200:
        raise EngineUnavailable(
            f"the engine refused pause_generation({pause_mode}) for weights v{version}: "
            f"{r.status_code} {r.text[:300]}"
        )
    try:
        await _load(http, engine_url, weights, version, headers)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await http.post(f"{engine_url}/continue_generation", json={}, headers=headers, timeout=60)
            except httpx.TransportError as e:  # down: a restarted engine is not paused
                log.warning("continue_generation at %s failed (%s)", engine_url, type(e).__name__)


async def _load(
    http: httpx.AsyncClient, engine_url: str, weights: Path, version: int, headers: dict[str, str]
) -> None:
    body = {"model_path": str(weights), "weight_version": str(version)}
    r = await _engine_post(http, f"{engine_url}/update_weights_from_disk", body, headers, version)
    if r.status_code != 200 or not r.json().get("success"):
        raise EngineUnavailable(f"the engine refused weights v{version}: {r.status_code} {r.text[:300]}")


async def _engine_post(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], version: int
) -> httpx.Response:
    """POST to an engine route, retried with backoff while the engine cannot be reached."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await http.post(url, json=body, headers=headers, timeout=600)
        except httpx.TransportError as e:
            if attempt == ATTEMPTS:
                raise EngineUnreachable(
                    f"the engine at {url.rsplit('/', 1)[0]} could not be reached to load weights "
                    f"v{version} ({type(e).__name__}); they are checkpointed and load once it answers"
                ) from None
            await anyio.sleep(backoff_s(attempt))
    raise AssertionError("unreachable")  # the loop returns or raises


async def _gateway(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> bool:
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
    """The trainer's side of the engine: load a version's weights on it (in ``mode``: the gateway
    drained around the load, or the engine paused under it), and put the current ones back on an engine
    that restarted with others."""

    def __init__(
        self,
        engine_url: str,
        *,
        gateway_url: str = "",
        mode: str = "drain",
        drain_timeout_s: float = 60.0,
        engine_key: object | None = None,
        gateway_key: object | None = None,
    ) -> None:
        self.engine_url, self.gateway_url, self.mode = engine_url, gateway_url, mode
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
            mode=self.mode,
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
