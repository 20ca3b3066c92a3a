"""The gateway under adversarial use (in-process ASGI, scripted engine): bounded generation, validated
sessions, precise errors, concurrent drains, a free event loop, session expiry, readiness."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from cua_stream.gateway.rendering import RenderedDelta, Renderer
from tests.unit.gateway_support import (
    TEMPERATURE,
    Harness,
    at_the_gate,
    h,
    qwen_processor,
    renderer,
    reply_of,
    screenshot_url,
    user_turn,
)

__all__ = ["h", "qwen_processor", "renderer"]  # fixtures

pytestmark = pytest.mark.anyio

DEEP = b"[" * 2000 + b"]" * 2000


def spec(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run_id": "run",
        "group_id": "g",
        "episode_id": "e",
        "sampling": {"temperature": TEMPERATURE},
    }
    body.update(over)
    return body


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (spec(sampling={"temperature": 0.8, "top_p": 5}), "sampling.top_p"),
        (spec(sampling={"temperature": 0.8, "max_new_tokens": -5}), "sampling.max_new_tokens"),
        (spec(sampling={"temperature": 0.8, "max_new_tokens": 0}), "sampling.max_new_tokens"),
        (spec(sampling={"temperature": 0.8, "stop": 5}), "sampling.stop"),
        (spec(sampling={"temperature": 0.8, "top_k": 5.5}), "sampling.top_k"),
        (spec(sampling={"temperature": 0.8, "stop_token_ids": ["a"]}), "sampling.stop_token_ids"),
        (spec(run_id=""), "run_id"),
        (spec(group_id=""), "group_id"),
        (spec(episode_id=""), "episode_id"),
        (spec(session_id="."), "session_id"),
        (spec(session_id=".."), "session_id"),
        (spec(session_id="a/b"), "session_id"),
        (spec(sampling={"temperature": 0.8, "max_new_tokens": 4097}), "max_new_tokens_cap"),
    ],
)
async def test_session_creation_refuses_what_the_engine_would_refuse_later(
    h: Harness, body: dict[str, Any], names: str
) -> None:
    r = await h.http.post("/sessions", json=body)
    assert r.status_code == 400 and names in r.json()["error"]["message"], r.text
    assert h.gateway.sessions == {}


async def test_request_sampling_is_checked_with_the_engines_rules(h: Harness) -> None:
    sid = await h.session()
    for bad in ({"top_p": 5}, {"top_k": 5.5}, {"seed": 2**64}, {"stop": [1]}):
        r = await h.chat(sid, [user_turn("hi")], **bad)
        assert r.status_code == 400 and "sampling_params." in r.json()["error"]["message"], bad
    assert h.engine.calls == []


async def test_generation_is_capped_by_the_configured_maximum_and_the_context(h: Harness) -> None:
    h.gateway.table.max_new_tokens_cap = 100
    h.gateway.context_length = 400
    sid = await h.session(max_new_tokens=50)
    reply_of(await h.chat(sid, [user_turn("hi")], max_tokens=10**9))
    assert h.engine.calls[-1].sampling_params["max_new_tokens"] == 100  # the cap, not 1e9
    reply_of(await h.chat(sid, [user_turn("x " * 360)]))
    sent = h.engine.calls[-1]
    assert sent.sampling_params["max_new_tokens"] == 400 - len(sent.input_ids) < 50  # what the context leaves
    r = await h.chat(sid, [user_turn("x " * 450)])
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 400 tokens" in r.json()["error"]["message"]  # LiteLLM's signal


@pytest.mark.parametrize("path", ["/sessions", "/sessions/s/v1/chat/completions", "/admin/drain"])
async def test_json_nested_too_deeply_is_a_400_not_a_crash(h: Harness, path: str) -> None:
    await h.http.post("/sessions", json=spec(session_id="s"))
    body = b'{"model":' + DEEP + b"}" if "chat" in path else DEEP
    r = await h.http.post(path, content=body)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
    assert "error" in r.json()


async def test_two_drains_at_once_both_return_when_the_gateway_is_idle(h: Harness) -> None:
    sid = await h.session()
    entered, release = anyio.Event(), anyio.Event()
    real = h.engine.generate

    async def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await real(*args, **kwargs)

    h.engine.generate = slow  # type: ignore[method-assign]
    answers: list[dict[str, Any]] = []
    # both drains return once the call in flight ends, not after their 30 s timeout

    async def drain() -> None:
        answers.append((await h.http.post("/admin/drain", json={"timeout_s": 30})).json())

    with anyio.fail_after(20):  # well under the drains' 30 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.chat, sid, [user_turn("hi")])
            await entered.wait()  # the call is in flight
            tg.start_soon(drain)
            tg.start_soon(drain)
            await at_the_gate(h.gateway.gate, drains=2)  # both wait for it
            release.set()
    assert answers == [{"draining": True, "in_flight": 0, "idle": True}] * 2


class BlockingRenderer(Renderer):
    """Blocks the thread that renders a large new part until the test lets it go."""

    def __init__(self, base: Renderer) -> None:
        self.__dict__.update(base.__dict__)
        self.entered = threading.Event()
        self.release = threading.Event()

    def render_delta(self, messages: Any, *, after_completion: Any) -> RenderedDelta:
        if sum(len(p) for m in messages for p in m.parts if isinstance(p, str)) > 100_000:
            self.entered.set()
            assert self.release.wait(120)
        return super().render_delta(messages, after_completion=after_completion)


async def test_tokenizing_a_huge_message_leaves_the_event_loop_free(
    renderer: Renderer, tmp_path: Path
) -> None:
    harness = Harness(BlockingRenderer(renderer), tmp_path)
    blocking: BlockingRenderer = harness.gateway.renderer  # type: ignore[assignment]
    harness.gateway.context_length = 10**7
    async with harness.http, anyio.create_task_group() as tg:
        sid = await harness.session()
        status: list[int] = []

        async def huge() -> None:
            status.append((await harness.chat(sid, [user_turn("ü" * 1_000_000)])).status_code)

        tg.start_soon(huge)
        assert await anyio.to_thread.run_sync(blocking.entered.wait, 60)  # rendering, in its thread
        with anyio.fail_after(30):  # rendering on the loop would hang every route, /health included
            assert (await harness.http.get("/health")).status_code == 200
            assert (await harness.http.get(f"/sessions/{sid}")).status_code == 200
        blocking.release.set()
    assert status == [200]


async def test_idle_sessions_expire_with_a_reason_and_the_session_count_is_bounded(
    renderer: Renderer, tmp_path: Path
) -> None:
    harness = Harness(renderer, tmp_path)
    now = [1000.0]
    gw = harness.gateway
    gw._clock = gw.table.clock = lambda: now[0]
    gw.table.idle_timeout_s, gw.table.max_sessions = 60.0, 2
    async with harness.http:
        old = await harness.session()
        now[0] += 30
        busy = (await harness.http.post("/sessions", json=spec(session_id="busy"))).json()["session_id"]
        r = await harness.http.post("/sessions", json=spec(session_id="third"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "too_many_sessions"
        now[0] += 31  # `old` idle 61 s, `busy` 31 s
        assert gw.expire_idle() == 1 and set(gw.sessions) == {busy}
        r = await harness.chat(old, [user_turn("hi")])
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_expired"
        assert "idle for more than 60 s" in r.json()["error"]["message"]
        assert (await harness.http.post("/sessions", json=spec(session_id="third"))).status_code == 201
        metrics = (await harness.http.get("/metrics")).text
        assert 'cua_gateway_sessions_expired_total{reason="idle"} 1' in metrics


async def test_readiness_follows_the_engine_and_liveness_does_not(h: Harness) -> None:
    r = await h.http.get("/ready")
    assert r.status_code == 200 and r.json()["engine"] == "ok"
    h.engine.healthy = False
    h.gateway._engine_checked = None  # skip the 1 s cache
    r = await h.http.get("/ready")
    assert r.status_code == 503 and r.json()["engine"].startswith("unreachable")
    r = await h.http.get("/health")
    assert r.status_code == 200 and r.json()["engine"].startswith("unreachable")


async def test_a_cancelled_call_frees_its_slot_and_records_nothing(h: Harness) -> None:
    sid = await h.session()
    started = anyio.Event()

    async def never(*args: Any, **kwargs: Any) -> Any:
        started.set()
        await anyio.sleep_forever()

    h.engine.generate = never  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.gateway.chat, sid, {"messages": [user_turn("hi", screenshot_url(0))]})
        await started.wait()
        assert h.gateway.in_flight == 1
        tg.cancel_scope.cancel()  # the client went away
    assert h.gateway.in_flight == 0 and h.gateway.sessions[sid].in_flight == 0
    assert h.turns() == [] and h.gateway.drain_status()["idle"] is True
    assert "cua_gateway_calls_cancelled_total 1" in (await h.http.get("/metrics")).text
