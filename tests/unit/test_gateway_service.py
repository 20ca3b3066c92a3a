"""The gateway over HTTP (in-process ASGI) with an in-memory sink and a scripted engine: recording,
chaining, every refusal with its code, pass-through, drain, durability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from cua_stream.blobs import LocalBlobStore
from cua_stream.events import CallKind
from cua_stream.gateway.engine_client import EngineHTTPError, EngineUnavailable
from cua_stream.gateway.rendering import Renderer
from tests.unit.gateway_support import (
    TEMPERATURE,
    Harness,
    at_the_gate,
    chain,
    h,
    qwen_processor,
    renderer,
    reply_of,
    screenshot_url,
    user_turn,
)

__all__ = ["h", "qwen_processor", "renderer"]  # fixtures

pytestmark = pytest.mark.anyio


async def test_turns_chain_exactly_into_what_the_engine_saw(h: Harness) -> None:
    sid = await h.session()
    msgs = [user_turn("Task: open settings", screenshot_url(0))]
    for i in range(1, 4):
        r = await h.chat(sid, msgs, cua_call_kind="agent_turn", prompt_cache_key="computer-1-x")
        msgs += [reply_of(r), user_turn("", screenshot_url(i))]
    events = h.turns()
    assert [e.seq for e in events] == [0, 1, 2]
    assert events[0].parent_call_id is None
    assert [e.parent_call_id for e in events[1:]] == [e.call_id for e in events[:-1]]
    full = chain(events)
    for event, sent in zip(events, h.engine.calls, strict=True):
        assert full[event.call_id] == [*sent.input_ids, *event.completion_ids]
        assert sent.routing_key == sid and sent.rid == event.call_id
        assert sent.sampling_params["temperature"] == TEMPERATURE
        assert sent.sampling_params["max_new_tokens"] == 64
    # each event carries only its new screenshot, stored in the blob store
    assert [len(e.images) for e in events] == [1, 1, 1]
    assert all(h.blobs.exists(e.images[0].sha256) for e in events)
    assert events[1].images[0].grid_thw == (1, 12, 20)
    assert list(events[0].completion_logprobs) == pytest.approx(
        [-0.25 - 0.01 * i for i in range(len(events[0].completion_ids))]
    )
    assert events[0].policy_version == 3 and events[0].kind is CallKind.AGENT_TURN
    # the engine got every image of the prompt, in prompt order
    assert len(h.engine.calls[2].image_data) == 3
    info = (await h.http.get(f"/sessions/{sid}")).json()
    assert info["n_calls"] == 3 and info["statuses"] == [] and info["calls_without_kind"] == 0
    assert info["tito_mismatch"]["strict_mismatches"] == 0


async def test_a_retried_identical_request_is_recorded_as_a_sibling(h: Harness) -> None:
    sid = await h.session()
    msgs = [user_turn("Task", screenshot_url(0))]
    first = reply_of(await h.chat(sid, msgs))
    msgs += [first, user_turn("", screenshot_url(1))]
    await h.chat(sid, msgs)
    await h.chat(sid, msgs)  # the agent retried (tenacity re-sends the same messages)
    root, try1, try2 = h.turns()
    assert try1.parent_call_id == try2.parent_call_id == root.call_id
    assert list(try1.prompt_ids) == list(try2.prompt_ids)


async def test_summary_calls_go_to_the_summaries_topic_and_a_reset_starts_a_new_root(h: Harness) -> None:
    sid = await h.session()
    msgs = [user_turn("Task: find the report", screenshot_url(0))]
    for i in range(1, 3):
        msgs += [
            reply_of(await h.chat(sid, msgs, cua_call_kind="agent_turn")),
            user_turn("", screenshot_url(i)),
        ]
    summary_request = [*msgs, user_turn("Summarize the progress so far for a hand-off.")]
    summary = reply_of(await h.chat(sid, summary_request, cua_call_kind="compaction_summary"))
    reset = [
        user_turn("Task: find the report"),
        user_turn(f"Summary of previous work: {summary['content']}"),
        {"role": "assistant", "content": "Understood."},
        user_turn("Continue from the summary above.", screenshot_url(9)),
    ]
    await h.chat(sid, reset, cua_call_kind="agent_turn")
    turns, summaries = h.turns(), h.summaries()
    assert [s.kind for s in summaries] == [CallKind.COMPACTION_SUMMARY]
    assert summaries[0].parent_call_id == turns[1].call_id  # it extends the conversation it summarises
    assert turns[2].parent_call_id is None  # the reset conversation is a new root
    assert sorted(e.seq for e in [*turns, *summaries]) == [0, 1, 2, 3]  # gap-free across topics
    info = (await h.http.get(f"/sessions/{sid}")).json()
    assert info["n_turns"] == 3 and info["n_summaries"] == 1


async def test_a_request_without_call_kind_is_an_agent_turn_and_is_counted(h: Harness) -> None:
    sid = await h.session()
    await h.chat(sid, [user_turn("hi")])
    assert h.turns()[0].kind is CallKind.AGENT_TURN
    assert (await h.http.get(f"/sessions/{sid}")).json()["calls_without_kind"] == 1
    assert "cua_gateway_missing_call_kind_total 1" in (await h.http.get("/metrics")).text
    r = await h.chat(sid, [user_turn("hi")], cua_call_kind="summary_please")
    assert r.status_code == 400 and "cua_call_kind" in r.text


async def test_temperature_mismatch_is_refused_naming_both_values(h: Harness) -> None:
    sid = await h.session()
    r = await h.chat(sid, [user_turn("hi")], temperature=0.7)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "temperature=0.7" in message and f"temperature={TEMPERATURE}" in message
    assert h.engine.calls == [] and h.turns() == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"input_ids": [1, 2, 3]}, "input_ids"),
        ({"logprob_start_len": 0}, "logprob_start_len"),
        ({"n": 2}, "n=2"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
async def test_client_token_control_is_refused_with_400(
    h: Harness, extra: dict[str, Any], needle: str
) -> None:
    sid = await h.session()
    r = await h.chat(sid, [user_turn("hi")], **extra)
    assert r.status_code == 400 and needle in r.json()["error"]["message"]
    assert h.engine.calls == []


async def test_extending_a_reply_cut_by_length_is_refused_with_409(h: Harness) -> None:
    sid = await h.session()
    h.engine.then(("length", "a very long rep"))
    msgs = [user_turn("Task")]
    cut = reply_of(await h.chat(sid, msgs, max_tokens=4))
    r = await h.chat(sid, [*msgs, cut, user_turn("go on")])
    assert r.status_code == 409 and h.turns()[0].call_id in r.json()["error"]["message"]
    # retrying the cut call itself is allowed (a sibling), and so is any other branch
    assert (await h.chat(sid, msgs)).status_code == 200
    info = (await h.http.get(f"/sessions/{sid}")).json()
    assert info["statuses"] == [409] and info["n_calls"] == 2


async def test_unknown_session_is_404_everywhere(h: Harness) -> None:
    assert (await h.chat("nope", [user_turn("hi")])).status_code == 404
    assert (await h.http.get("/sessions/nope")).status_code == 404
    assert (await h.http.delete("/sessions/nope")).status_code == 404


async def test_engine_errors_pass_through_unrecorded(h: Harness) -> None:
    sid = await h.session()
    body = msgspec.json.encode({"error": {"message": "sampling_params.frequency_penalty unsupported"}})
    h.engine.then(EngineHTTPError(400, body, "application/json"), EngineUnavailable("connection refused"))
    h.engine.then(("abort", ""))
    r = await h.chat(sid, [user_turn("hi")])
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "engine answered 400: sampling_params.frequency_penalty unsupported",
        "type": "invalid_request_error",
        "code": "engine_error",
        "param": None,
    }
    r = await h.chat(sid, [user_turn("hi")])
    assert r.status_code == 503 and "connection refused" in r.text
    r = await h.chat(sid, [user_turn("hi")])
    assert r.status_code == 503 and "aborted" in r.text
    assert h.turns() == []
    assert (await h.chat(sid, [user_turn("hi")])).status_code == 200
    info = (await h.http.get(f"/sessions/{sid}")).json()
    assert info["statuses"] == [400, 503, 503] and info["n_calls"] == 1
    assert h.turns()[0].seq == 0
    # a plain-text 500 from the engine reaches the client in the OpenAI error shape, never as it was
    h.engine.then(EngineHTTPError(500, b"Internal Server Error", "text/plain"))
    r = await h.chat(sid, [user_turn("hi")])
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json()["error"]["message"] == "engine answered 500: Internal Server Error"


async def test_a_record_that_cannot_be_published_is_not_acknowledged(h: Harness) -> None:
    sid = await h.session()
    msgs = [user_turn("Task")]
    h.sink.failures = 1
    r = await h.chat(sid, msgs)
    assert r.status_code == 503 and "could not be recorded" in r.text
    assert h.turns() == [] and (await h.http.get(f"/sessions/{sid}")).json()["n_calls"] == 0
    ok = reply_of(await h.chat(sid, msgs))
    await h.chat(sid, [*msgs, ok, user_turn("next")])
    assert [e.seq for e in h.turns()] == [0, 1]  # gap-free despite the failed call


async def test_drain_refuses_new_calls_waits_for_in_flight_and_resume_reopens(h: Harness) -> None:
    sid = await h.session()
    entered, release = anyio.Event(), anyio.Event()
    original = h.engine.generate

    async def slow_generate(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await original(*args, **kwargs)

    h.engine.generate = slow_generate  # type: ignore[method-assign]
    statuses: list[int] = []
    async with anyio.create_task_group() as tg:

        async def in_flight_call() -> None:
            statuses.append((await h.chat(sid, [user_turn("slow")])).status_code)

        tg.start_soon(in_flight_call)
        await entered.wait()  # the call is at the engine
        short = (await h.http.post("/admin/drain", json={"timeout_s": 0.05})).json()
        assert short == {"draining": True, "in_flight": 1, "idle": False}
        r = await h.chat(sid, [user_turn("new")])
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        release.set()
        done = (await h.http.post("/admin/drain", json={"timeout_s": 5})).json()
        assert done == {"draining": True, "in_flight": 0, "idle": True}
    assert statuses == [200]  # the call in flight finished and was recorded
    assert len(h.turns()) == 1
    assert (await h.http.post("/admin/resume")).json()["draining"] is False
    assert (await h.chat(sid, [user_turn("after")])).status_code == 200
    assert (await h.http.get(f"/sessions/{sid}")).json()["statuses"] == [503]


async def test_the_admin_pause_routes_take_sglangs_shapes_and_retract_opens_the_window(h: Harness) -> None:
    ok = {"message": "Generation paused successfully.", "status": "ok"}
    assert (await h.http.post("/admin/pause_generation", json={"mode": "retract"})).json() == ok
    assert h.gateway.retract.open == 1
    r = await h.http.post("/admin/continue_generation", json={})
    assert r.json() == {"message": "Generation continued successfully.", "status": "ok"}
    assert h.gateway.retract.open == 0 and h.gateway.retract.epoch == 1
    assert (await h.http.post("/admin/pause_generation", json={"mode": "in_place"})).status_code == 200
    assert h.gateway.retract.epoch == 1  # in_place needs nothing of the gateway
    bad = await h.http.post("/admin/pause_generation", json={"mode": "sideways"})
    assert bad.status_code == 400 and "mode: expected one of abort, retract, in_place" in bad.text


async def test_stream_is_answered_as_one_chunk_and_done(h: Harness) -> None:
    sid = await h.session()
    r = await h.chat(sid, [user_turn("hi")], stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [line for line in r.text.split("\n\n") if line]
    assert len(events) == 2 and events[1] == "data: [DONE]"
    chunk = msgspec.json.decode(events[0].removeprefix("data: "))
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"][0]["delta"]["content"] == "reply 1"
    assert chunk["choices"][0]["finish_reason"] == "stop"
    assert len(h.turns()) == 1


async def test_session_lifecycle_and_bad_session_bodies(h: Harness) -> None:
    sid = await h.session()
    assert (await h.http.post("/sessions", json={"run_id": "r"})).status_code == 400
    bad = {"run_id": "r", "group_id": "g", "episode_id": "e", "sampling": {"top_p": 0.9}}
    r = await h.http.post("/sessions", json=bad)
    assert r.status_code == 400 and "temperature" in r.text
    dup = {
        "run_id": "r",
        "group_id": "g",
        "episode_id": "e",
        "sampling": {"temperature": 1},
        "session_id": sid,
    }
    assert (await h.http.post("/sessions", json=dup)).status_code == 409
    await h.chat(sid, [user_turn("hi")])
    final = (await h.http.delete(f"/sessions/{sid}")).json()
    assert final["n_calls"] == 1 and final["tito_mismatch"]["checked"] == 1
    assert (await h.http.get(f"/sessions/{sid}")).status_code == 404
    assert 'cua_gateway_tito_mismatch_total{type="none"} 1' in (await h.http.get("/metrics")).text


async def test_api_key_is_required_when_configured(renderer: Renderer, tmp_path: Path) -> None:
    harness = Harness(renderer, tmp_path, api_key="s3cret")
    body = {"run_id": "r", "group_id": "g", "episode_id": "e", "sampling": {"temperature": 0.8}}
    async with harness.http:
        for path in ("/health", "/ready", "/metrics"):  # probes and scrapers carry no key
            assert (await harness.http.get(path)).status_code == 200, path
        for header in (None, "s3cret", "Basic s3cret", "Bearer wrong", "Bearer", "Bearers3cret"):
            headers = {} if header is None else {"authorization": header}
            r = await harness.http.post("/sessions", json=body, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", header
        for n, header in enumerate(("Bearer s3cret", "bearer s3cret", "BEARER  s3cret")):  # RFC 7235
            r = await harness.http.post(
                "/sessions", json={**body, "session_id": f"s{n}"}, headers={"authorization": header}
            )
            assert r.status_code == 201, header


async def test_a_sessions_own_key_opens_its_chat_route_and_nothing_else(
    renderer: Renderer, tmp_path: Path
) -> None:
    harness = Harness(renderer, tmp_path, api_key="admin-key")
    admin = {"authorization": "Bearer admin-key"}
    body = {"run_id": "r", "group_id": "g", "episode_id": "e", "sampling": {"temperature": TEMPERATURE}}
    async with harness.http:
        one = (await harness.http.post("/sessions", json={**body, "session_id": "one"}, headers=admin)).json()
        two = (await harness.http.post("/sessions", json={**body, "session_id": "two"}, headers=admin)).json()
        assert one["session_key"] != two["session_key"] and len(one["session_key"]) >= 32
        assert one["context_length"] == harness.gateway.context_length
        chat = {"model": "policy", "messages": [user_turn("hi")], "temperature": TEMPERATURE}
        own = {"authorization": f"Bearer {one['session_key']}"}
        assert (
            await harness.http.post("/sessions/one/v1/chat/completions", json=chat, headers=own)
        ).status_code == 200
        # not another session's route, not the session's admin routes, not the gateway's
        for method, path in (
            ("POST", "/sessions/two/v1/chat/completions"),
            ("GET", "/sessions/one"),
            ("DELETE", "/sessions/one"),
            ("POST", "/sessions"),
            ("POST", "/admin/drain"),
        ):
            r = await harness.http.request(method, path, json=chat if "chat" in path else {}, headers=own)
            assert r.status_code == 401, (method, path)
        assert one["session_key"] not in repr(harness.gateway.sessions["one"])  # never in a log line


async def test_an_image_that_is_not_an_image_is_refused(h: Harness) -> None:
    sid = await h.session()
    r = await h.chat(sid, [user_turn("look", "data:image/png;base64,aGVsbG8gd29ybGQ=")])
    assert r.status_code == 400 and "not a decodable image" in r.json()["error"]["message"]
    r = await h.http.post(f"/sessions/{sid}/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400 and "not valid JSON" in r.text
    assert h.engine.calls == [] and (await h.http.get(f"/sessions/{sid}")).json()["statuses"] == [400, 400]


async def test_with_a_drain_hold_a_call_waits_for_the_resume_instead_of_failing(h: Harness) -> None:
    sid = await h.session()
    h.gateway.gate.hold_s = 10.0
    await h.http.post("/admin/drain", json={"timeout_s": 1})
    statuses: list[int] = []
    async with anyio.create_task_group() as tg:

        async def held_call() -> None:
            statuses.append((await h.chat(sid, [user_turn("during the update")])).status_code)

        tg.start_soon(held_call)
        with anyio.fail_after(30):
            await at_the_gate(h.gateway.gate, held=1)
        assert statuses == [] and h.engine.calls == []  # held, not sent to the old weights
        await h.http.post("/admin/resume")
    assert statuses == [200] and len(h.turns()) == 1
    h.gateway.gate.hold_s = 0.05
    await h.http.post("/admin/drain", json={"timeout_s": 1})
    assert (await h.chat(sid, [user_turn("too long")])).status_code == 503


async def test_a_blob_store_failure_is_503_and_nothing_is_recorded(h: Harness, tmp_path: Path) -> None:
    class FullDisk(LocalBlobStore):
        def put(self, data: bytes) -> str:
            raise OSError(28, "No space left on device")

    h.gateway.blobs = FullDisk(tmp_path / "full")
    sid = await h.session()
    r = await h.chat(sid, [user_turn("look", screenshot_url(1))])
    assert r.status_code == 503 and "No space left" in r.text
    assert h.turns() == [] and len(h.engine.calls) == 1


async def test_json_escaped_screenshots_are_read_forwarded_and_matched(h: Harness) -> None:
    sid = await h.session()
    shot = screenshot_url(4)
    assert "+" in shot or "/" in shot.partition(",")[2]

    def escaped(messages: list[dict[str, Any]]) -> bytes:
        raw = msgspec.json.encode({"messages": messages, "temperature": TEMPERATURE})
        return raw.replace(b"+", b"\\u002b").replace(b"/", b"\\/")  # legal JSON, other bytes

    async def post(messages: list[dict[str, Any]]) -> httpx.Response:
        return await h.http.post(f"/sessions/{sid}/v1/chat/completions", content=escaped(messages))

    msgs = [user_turn("Task", shot)]
    first = reply_of(await post(msgs))
    await post([*msgs, first, user_turn("", screenshot_url(5))])
    root, child = h.turns()
    assert child.parent_call_id == root.call_id
    assert h.engine.calls[0].image_data == [shot]  # the engine decodes the literal to the same URL
    assert h.engine.calls[1].image_data == [shot, screenshot_url(5)]
    assert h.blobs.exists(root.images[0].sha256) and root.images[0].mime == "image/webp"
