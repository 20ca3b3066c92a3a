"""The reference engine and the gateway under adversarial use, over real HTTP with the tiny model: a
generation that never stops cannot starve others, a client that gives up frees the engine, bad input is
a JSON 400, and an error never spoils the keep-alive connection the next request uses."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from PIL import Image

from cua_stream.config import BusConfig
from cua_stream.engine.config import EngineConfig
from cua_stream.gateway.config import GatewayConfig
from tests.conftest import free_port, wait_until
from tests.integration.gateway_servers import GatewayProcess, serving, tiny_model_dir
from tests.unit.gateway_support import png_bomb, user_turn

__all__ = ["tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.model, pytest.mark.anyio]

PROMPT = "<|im_start|>user\nDescribe the desktop.<|im_end|>\n<|im_start|>assistant\n"
IMAGE_PAD, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"


@pytest.fixture(scope="module")
def own_engine(tiny_model_dir: Path) -> Iterator[tuple[str, Any]]:
    """An engine in this process (a test breaks one of its methods on purpose): (url, service)."""
    from cua_stream.engine.server import build_server

    server = build_server(EngineConfig(model_path=str(tiny_model_dir), port=free_port()))
    with serving(server):
        yield f"http://127.0.0.1:{server.config.port}", server.config.app.state.service


def body(**sampling: Any) -> dict[str, Any]:
    return {"text": PROMPT, "sampling_params": {"temperature": 1.0, **sampling}, "return_logprob": True}


async def running(http: httpx.AsyncClient) -> int:
    return (await http.get("/health")).json()["running_requests"]


async def test_a_generation_that_never_stops_cannot_starve_a_short_one(own_engine: tuple[str, Any]) -> None:
    url, _ = own_engine
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        long: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def endless() -> None:
                r = await http.post(
                    "/generate", json={**body(max_new_tokens=10**9, ignore_eos=True), "rid": "L"}
                )
                long.append(r.json())

            tg.start_soon(endless)

            async def started() -> bool:
                return await running(http) == 1

            with anyio.fail_after(30):  # the endless generation started
                await wait_until(started)
            short = await http.post("/generate", json=body(max_new_tokens=8, ignore_eos=True))
            assert short.status_code == 200 and len(short.json()["output_ids"]) == 8
            assert long == [] and await running(http) == 1  # the endless one is still going
            assert (await http.post("/abort_request", json={"rid": "L"})).status_code == 200
        (aborted,) = long
        assert aborted["meta_info"]["finish_reason"]["type"] == "abort"
        assert 0 < len(aborted["output_ids"]) < 10**5
        assert len(aborted["meta_info"]["output_token_logprobs"]) == len(aborted["output_ids"])


async def test_a_client_that_gives_up_frees_the_engine(own_engine: tuple[str, Any]) -> None:
    url, _ = own_engine
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as http,
        httpx.AsyncClient(base_url=url) as client,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.post("/generate", json=body(max_new_tokens=10**9, ignore_eos=True)))

            async def generating() -> bool:
                return await running(http) == 1

            with anyio.fail_after(60):
                await wait_until(generating)
            tg.cancel_scope.cancel()  # the client gives up on a generation under way

        async def idle() -> bool:
            return await running(http) == 0

        with anyio.fail_after(60):  # aborted at its next step once the client left (a hang guard)
            await wait_until(idle)


def image_request(data: bytes, pads: int = 1) -> dict[str, Any]:
    text = (
        f"<|im_start|>user\n{VISION_START}{IMAGE_PAD * pads}{VISION_END}hi<|im_end|>\n<|im_start|>assistant\n"
    )
    return {
        "text": text,
        "image_data": ["data:image/png;base64," + base64.b64encode(data).decode()],
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 2},
    }


def png(size: tuple[int, int] = (64, 64)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        (image_request(png()[:-40]), "cannot decode image"),  # truncated PNG
        (image_request(png_bomb()), "pixels"),  # 20000x20000 1-bit: a decompression bomb
        (body(sampling_seed=2**64), "sampling_seed"),
        (body(top_k=5.5), "top_k"),
        ({"text": PROMPT, "sampling_params": [1]}, "sampling_params"),
        ({"text": PROMPT, "image_data": [1]}, "image_data"),
    ],
    ids=["truncated-png", "png-bomb", "seed-2**64", "fractional-top_k", "params-not-object", "image-not-str"],
)
async def test_bad_input_is_a_json_400_and_the_connection_stays_usable(
    own_engine: tuple[str, Any], request_body: dict[str, Any], expected: str
) -> None:
    url, _ = own_engine
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for _ in range(3):
            r = await http.post("/generate", json=request_body)
            assert r.status_code == 400 and expected in r.json()["error"]["message"], r.text
            ok = await http.post("/generate", json=body(max_new_tokens=2))  # same keep-alive connection
            assert ok.status_code == 200, ok.text
        r = await http.post("/generate", content=b"[" * 2000 + b"]" * 2000)
        assert r.status_code == 400 and "error" in r.json()


async def test_an_unexpected_error_is_a_json_500_and_never_spoils_the_next_request(
    own_engine: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, service = own_engine
    real = service.runner.pixel_inputs

    def flaky(image_data: list[str]) -> Any:
        if image_data == ["boom"]:
            raise RuntimeError("a bug in the engine")
        return real(image_data)

    monkeypatch.setattr(service.runner, "pixel_inputs", flaky)
    limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)  # one connection, reused
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        for _ in range(10):
            r = await http.post("/generate", json={**body(max_new_tokens=1), "image_data": ["boom"]})
            assert r.status_code == 500 and "a bug in the engine" in r.json()["error"]["message"]
            assert (await http.post("/generate", json=body(max_new_tokens=1))).status_code == 200


async def test_a_client_that_gives_up_on_the_gateway_frees_gateway_and_engine(
    own_engine: tuple[str, Any], bus_config: BusConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cua_stream.gateway.server import build_server

    url, service = own_engine
    monkeypatch.setattr(service.runner, "eos_ids", frozenset())  # replies that never stop by themselves
    config = GatewayConfig(
        model_path=str(service.config.model_path), engine_url=url, port=free_port(), blob_dir=str(tmp_path)
    )
    gw = GatewayProcess(f"http://127.0.0.1:{config.port}", tmp_path, bus_config)
    with serving(build_server(config, bus_config)):
        sid = await gw.session(max_new_tokens=4096)
        chat = {"model": "m", "messages": [user_turn("go on forever")], "temperature": 1.0}
        async with httpx.AsyncClient(timeout=60) as http:
            assert (await http.get(f"{gw.url}/ready")).json()["engine"] == "ok"
            async with httpx.AsyncClient(base_url=url, timeout=60) as engine_http:
                async with httpx.AsyncClient(timeout=60) as agent, anyio.create_task_group() as tg:
                    tg.start_soon(lambda: agent.post(f"{gw.base_url(sid)}/chat/completions", json=chat))

                    async def generating() -> bool:
                        return await running(engine_http) == 1

                    with anyio.fail_after(60):
                        await wait_until(generating)
                    tg.cancel_scope.cancel()  # the agent gives up on a call whose generation is under way

                async def idle() -> bool:
                    in_flight = (await http.get(f"{gw.url}/admin/drain")).json()["in_flight"]
                    return in_flight == 0 and await running(engine_http) == 0

                # the gateway cancelled the call and aborted the generation (a hang guard)
                with anyio.fail_after(60):
                    await wait_until(idle)
            assert (await gw.info(sid))["n_calls"] == 0  # nothing recorded for the abandoned call
