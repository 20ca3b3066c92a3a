"""Credentials end to end, with a real engine (tiny model), gateway and broker: every route but the probes
takes a key when one is set; the admin routes (drain, resume, weight loads) take only the admin key; the
gateway reaches a keyed engine; the trainer's weight push carries both admin keys; and a session's own key
never lands on a topic or a metrics page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from consumers.trainer.weights import engine_version, push_weights
from cua_stream.auth import session_keys_in
from cua_stream.bus.reader import read_raw
from cua_stream.config import BusConfig, Secret
from cua_stream.engine.config import EngineConfig
from cua_stream.errors import EngineUnavailable
from cua_stream.gateway.config import GatewayConfig
from cua_stream.topics import TURNS
from tests.conftest import free_port
from tests.integration.gateway_servers import serving, tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.anyio]

ENGINE_KEY, ENGINE_ADMIN = "engine-key", "engine-admin-key"
GATEWAY_KEY, GATEWAY_ADMIN = "gateway-key", "gateway-admin-key"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def services(tiny_model_dir: Path, bus_config: BusConfig, tmp_path: Path) -> Iterator[tuple[str, str]]:
    from cua_stream.engine.server import build_server as engine_server
    from cua_stream.gateway.server import build_server as gateway_server

    engine = EngineConfig(
        model_path=str(tiny_model_dir),
        port=free_port(),
        api_key=Secret(ENGINE_KEY),
        admin_api_key=Secret(ENGINE_ADMIN),
    )
    gateway = GatewayConfig(
        model_path=str(tiny_model_dir),
        engine_url=f"http://127.0.0.1:{engine.port}",
        port=free_port(),
        blob_dir=str(tmp_path / "blobs"),
        api_key=Secret(GATEWAY_KEY),
        admin_api_key=Secret(GATEWAY_ADMIN),
        engine_api_key=Secret(ENGINE_KEY),
    )
    with serving(engine_server(engine)), serving(gateway_server(gateway, bus_config)):
        yield f"http://127.0.0.1:{engine.port}", f"http://127.0.0.1:{gateway.port}"


async def test_keys_guard_every_route_and_admin_routes_take_only_the_admin_key(
    services: tuple[str, str], tiny_model_dir: Path, bus_config: BusConfig
) -> None:
    engine, gateway = services
    async with httpx.AsyncClient(timeout=120) as http:
        # the engine: probes open, everything else keyed, weights only with the admin key
        assert (await http.get(f"{engine}/health")).status_code == 200
        assert (await http.get(f"{engine}/get_model_info")).status_code == 401
        assert (await http.get(f"{engine}/get_model_info", headers=bearer(ENGINE_KEY))).status_code == 200
        load = {"model_path": str(tiny_model_dir), "weight_version": "7"}
        for key in (None, ENGINE_KEY, "wrong"):
            headers = bearer(key) if key else {}
            r = await http.post(f"{engine}/update_weights_from_disk", json=load, headers=headers)
            assert r.status_code == 401, key
        # the gateway: a session needs the gateway key; its chat takes its own key and reaches the keyed engine
        body = {
            "run_id": "keys",
            "group_id": "g",
            "episode_id": "e",
            "sampling": {"temperature": 1.0, "max_new_tokens": 4},
        }
        assert (await http.post(f"{gateway}/sessions", json=body)).status_code == 401
        created = (await http.post(f"{gateway}/sessions", json=body, headers=bearer(GATEWAY_KEY))).json()
        session_key = created["session_key"]
        assert session_keys_in(session_key.encode()) == [session_key.encode()]  # scanners can find it
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 1.0}
        url = f"{gateway}/sessions/{created['session_id']}/v1/chat/completions"
        r = await http.post(url, json=chat, headers=bearer(session_key))
        assert r.status_code == 200, r.text
        for key in (GATEWAY_KEY, session_key):  # drain: the admin key only
            assert (
                await http.post(f"{gateway}/admin/drain", json={"timeout_s": 1}, headers=bearer(key))
            ).status_code == 401
        assert (await http.get(f"{gateway}/metrics")).status_code == 200
        metrics = (await http.get(f"{gateway}/metrics")).text
        # the trainer's push: drain, load, resume, with the two admin keys
        await push_weights(
            http,
            engine_url=engine,
            gateway_url=gateway,
            weights=tiny_model_dir,
            version=7,
            engine_key=Secret(ENGINE_ADMIN),
            gateway_key=Secret(GATEWAY_ADMIN),
        )
        assert await engine_version(http, engine, Secret(ENGINE_KEY)) == "7"
        assert (await http.post(url, json=chat, headers=bearer(session_key))).status_code == 200  # resumed
        with pytest.raises(EngineUnavailable, match="refused weights v8: 401"):
            await push_weights(http, engine_url=engine, gateway_url="", weights=tiny_model_dir, version=8,
                               engine_key=Secret(ENGINE_KEY))  # fmt: skip
    # the session's key is on no topic and no metrics page
    raw = b"".join(
        [
            bytes(m.value or b"") + b"".join(v or b"" for _, v in m.headers)
            async for m in read_raw(bus_config, bus_config.topics().name_of(TURNS))
        ]
    )
    assert raw and session_key.encode() not in raw and not session_keys_in(raw)
    assert session_key not in metrics
