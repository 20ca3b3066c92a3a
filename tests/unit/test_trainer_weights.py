"""Loading weights on the engine when parts are down (httpx's in-memory transport stands in for the
servers; unit test only): an unreachable gateway is skipped, an unreachable engine is retried and then
reported, and the gateway is always resumed; a corrupted checkpoint is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from consumers.trainer import checkpoint, weights
from consumers.trainer.config import TrainerConfig
from cua_stream.errors import ConfigError, EngineUnavailable, EngineUnreachable

pytestmark = pytest.mark.anyio


def client(handler: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))  # type: ignore[arg-type]


async def test_an_unreachable_gateway_is_skipped_and_the_engine_still_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.url.host}{request.url.path}")
        if request.url.host == "gateway":
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"success": True})

    async with client(handler) as http:
        await weights.push_weights(
            http, engine_url="http://engine", gateway_url="http://gateway", weights=Path("/w"), version=3
        )
    assert seen == ["gateway/admin/drain", "engine/update_weights_from_disk"]  # no resume: never drained


async def test_an_unreachable_engine_is_retried_then_reported_and_the_gateway_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(weights, "backoff_s", lambda attempt: 0.0)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.url.host}{request.url.path}")
        if request.url.host == "engine":
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"idle": True})

    async with client(handler) as http:
        with pytest.raises(EngineUnreachable, match="could not be reached to load weights v3"):
            await weights.push_weights(
                http, engine_url="http://engine", gateway_url="http://gateway", weights=Path("/w"), version=3
            )
    assert seen.count("engine/update_weights_from_disk") == weights.ATTEMPTS
    assert seen[0] == "gateway/admin/drain" and seen[-1] == "gateway/admin/resume"


def test_a_corrupted_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / checkpoint.FILE).write_text('{"run_id": "r", "step": "three"')
    with pytest.raises(ConfigError, match="not a cua-stream trainer checkpoint"):
        checkpoint.load(tmp_path)


@pytest.mark.parametrize(
    ("mode", "routes"),
    [
        (
            "in_place",
            [
                ("engine/pause_generation", {"mode": "in_place"}),
                ("engine/update_weights_from_disk", {"model_path": "/w", "weight_version": "3"}),
                ("engine/continue_generation", {}),
            ],
        ),
        (
            "retract",
            [
                ("gateway/admin/pause_generation", {"mode": "retract"}),
                ("engine/pause_generation", {"mode": "abort"}),  # the gateway continues what it aborts
                ("engine/update_weights_from_disk", {"model_path": "/w", "weight_version": "3"}),
                ("engine/continue_generation", {}),
                ("gateway/admin/continue_generation", {}),
            ],
        ),
    ],
)
async def test_a_pausing_update_speaks_sglang_and_always_continues_even_when_the_load_is_refused(
    mode: str, routes: list[tuple[str, dict[str, str]]]
) -> None:
    seen: list[tuple[str, dict[str, str]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((f"{request.url.host}{request.url.path}", json.loads(request.content or b"{}")))
        if request.url.path == "/update_weights_from_disk":
            return httpx.Response(400, json={"success": False, "message": "no such weights"})
        return httpx.Response(200, json={"message": "ok", "status": "ok"})

    async with client(handler) as http:
        with pytest.raises(EngineUnavailable, match="refused weights v3"):
            await weights.push_weights(
                http,
                engine_url="http://engine",
                gateway_url="http://gateway",
                weights=Path("/w"),
                version=3,
                mode=mode,
            )
    assert seen == routes  # no drain: the gateway keeps admitting calls


def test_the_weight_update_mode_is_checked_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(
        ConfigError, match=r"trainer\.weight_update: expected one of drain, in_place, retract"
    ):
        TrainerConfig(run_id="r1", model_path=str(tmp_path), weight_update="pause")
    assert (
        TrainerConfig(run_id="r1", model_path=str(tmp_path), weight_update="retract").weight_update
        == "retract"
    )
