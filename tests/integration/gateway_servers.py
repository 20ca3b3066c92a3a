"""Real servers for the gateway/engine integration tests: the tiny model (built once per session with the
CLI), the reference engine (``cua-stream engine`` in a subprocess, once per session) and the gateway
(uvicorn on a free port, per test, publishing to the test's Kafka topics)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from cua_stream.config import BusConfig
from cua_stream.gateway.config import GatewayConfig
from cua_stream.procs import child
from tests.conftest import free_port, wait_until

ENGINE_START_S = 180.0


_built: dict[str, Path] = {}


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Imported into several modules (one fixture definition each): build once per session all the same.
    if "dir" not in _built:
        out = tmp_path_factory.mktemp("tiny-qwen3-vl")
        cmd = [sys.executable, "-m", "cua_stream", "make-tiny-model", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ.copy())
        assert done.returncode == 0, done.stderr
        _built["dir"] = out
    return _built["dir"]


@dataclass(frozen=True)
class EngineProcess:
    url: str
    model_dir: Path

    async def recent(self) -> dict[str, dict[str, Any]]:
        """The engine's own record of what it consumed and produced, by rid (= the gateway's call id)."""
        async with httpx.AsyncClient(timeout=30) as http:
            return {r["rid"]: r for r in (await http.get(f"{self.url}/debug/requests")).json()}


@pytest.fixture(scope="session")
def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    port = free_port()
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    url = f"http://127.0.0.1:{port}"
    args = ["engine", str(tiny_model_dir), "--port", str(port), "--debug-history", "1024", "--seed", "7"]
    with child(args, f"{url}/health", log, timeout_s=ENGINE_START_S):
        yield EngineProcess(url, tiny_model_dir)


async def decode_rounds(http: httpx.AsyncClient, engine_url: str, n: int) -> None:
    """Until the reference engine has finished ``n`` more decode rounds that advanced a request (its
    ``busy_s`` grew ``n`` times). Each round advances every request the engine holds by a token, so after
    two every request held at the call has tokens: a generation is under way, however fast the machine.
    The caller bounds the wait."""
    for _ in range(n):
        before = (await http.get(f"{engine_url}/debug/scheduler")).json()["busy_s"]

        async def advanced(before: float = before) -> bool:
            return (await http.get(f"{engine_url}/debug/scheduler")).json()["busy_s"] > before

        await wait_until(advanced, poll_s=0.01)


@contextmanager
def serving(server: uvicorn.Server) -> Iterator[None]:
    """Run a uvicorn server in a thread (its own event loop) until the block ends."""
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start (see the log above)")
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(60)


@dataclass(frozen=True)
class GatewayProcess:
    url: str
    blob_dir: Path
    bus: BusConfig

    async def session(self, *, temperature: float = 1.0, episode: str = "ep-1", **sampling: Any) -> str:
        body = {
            "run_id": "run-it",
            "group_id": "group-1",
            "episode_id": episode,
            "sampling": {"temperature": temperature, "max_new_tokens": 96, **sampling},
        }
        r = await self.post("/sessions", json=body)
        assert r.status_code == 201, r.text
        return r.json()["session_id"]

    def base_url(self, session_id: str) -> str:
        return f"{self.url}/sessions/{session_id}/v1"

    async def info(self, session_id: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=60) as http:
            r = await http.get(f"{self.url}/sessions/{session_id}")
        assert r.status_code == 200, r.text
        return r.json()

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as http:
            return await http.post(f"{self.url}{path}", **kwargs)


@pytest.fixture
def gateway(engine: EngineProcess, bus_config: BusConfig, tmp_path: Path) -> Iterator[GatewayProcess]:
    from cua_stream.gateway.server import build_server

    config = GatewayConfig(
        model_path=str(engine.model_dir),
        engine_url=engine.url,
        port=free_port(),
        blob_dir=str(tmp_path / "blobs"),
    )
    with serving(build_server(config, bus_config)):
        yield GatewayProcess(f"http://127.0.0.1:{config.port}", Path(config.blob_dir), bus_config)
