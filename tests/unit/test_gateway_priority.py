"""A gateway whose engine calls are bounded (``engine_max_in_flight``) serves a waiting training call
before an evaluation call that waited longer, over HTTP (in-process ASGI, the real app and renderer),
and shows the queue per lane on ``/metrics``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.memory import MemorySink
from cua_stream.gateway.app import create_app
from cua_stream.gateway.engine_client import EngineReply
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from tests.unit.gateway_support import TEMPERATURE, ScriptedEngine, qwen_processor, renderer, user_turn

__all__ = ["qwen_processor", "renderer"]  # fixtures

pytestmark = pytest.mark.anyio


class HeldEngine(ScriptedEngine):
    """Answers once ``go`` is set; ``started`` is set by the first call."""

    def __init__(self, renderer: Renderer) -> None:
        super().__init__(renderer)
        self.go, self.started = anyio.Event(), anyio.Event()

    async def generate(self, *args: Any, **kwargs: Any) -> EngineReply:
        self.started.set()
        await self.go.wait()
        return await super().generate(*args, **kwargs)


async def queued(gateway: Gateway, n: int) -> None:
    """Until ``n`` calls wait for an engine slot (bounded)."""
    for _ in range(1000):
        if sum(gateway.engine_waiting().values()) >= n:
            return
        await anyio.sleep(0.01)
    raise AssertionError(f"{n} calls never waited: {gateway.engine_waiting()}")


async def test_training_calls_go_to_a_bounded_engine_before_evaluations(
    renderer: Renderer, tmp_path: Path
) -> None:
    engine = HeldEngine(renderer)
    gateway = Gateway(renderer=renderer, engine=engine, sink=MemorySink(),
                      blobs=LocalBlobStore(tmp_path / "blobs"), engine_max_in_flight=1)  # fmt: skip
    transport = httpx.ASGITransport(app=create_app(gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:

        async def session(run: str, episode: str) -> str:
            body = {"run_id": run, "group_id": f"{run}-g", "episode_id": episode,
                    "sampling": {"temperature": TEMPERATURE, "max_new_tokens": 16}}  # fmt: skip
            r = await http.post("/sessions", json=body)
            assert r.status_code == 201, r.text
            return r.json()["session_id"]

        async def chat(sid: str) -> None:
            body = {"model": "policy", "messages": [user_turn("click OK")], "temperature": TEMPERATURE}
            r = await http.post(f"/sessions/{sid}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text

        train_1, eval_1, eval_2, train_2 = [
            await session(run, ep)
            for run, ep in (
                ("run-a", "t1"),
                ("eval-run-a-v1", "e1"),
                ("eval-run-a-v1", "e2"),
                ("run-a", "t2"),
            )
        ]
        async with anyio.create_task_group() as tg:
            tg.start_soon(chat, train_1)
            await engine.started.wait()  # training's first call holds the one slot
            for n, sid in enumerate((eval_1, eval_2, train_2), 1):  # the evaluation's calls come first
                tg.start_soon(chat, sid)
                await queued(gateway, n)
            page = (await http.get("/metrics")).text
            engine.go.set()
    assert 'cua_gateway_engine_waiting{lane="eval"} 2' in page
    assert 'cua_gateway_engine_waiting{lane="train"} 1' in page
    assert [c.routing_key for c in engine.calls] == [train_1, train_2, eval_1, eval_2]
    assert gateway.engine_slots.in_flight == 0
