"""The trainer's three weight-update modes (``push_weights``) against the real reference engine and the
real gateway over HTTP, with the call records read back from Kafka: ``drain`` (calls in flight finish on
the old weights), ``in_place`` (they finish whole under the new ones, stamped with both versions) and
``retract`` (aborted, then continued by the gateway from their tokens so far: one record, one reply,
equal to one call of the prompt with that first part as a forced prefix). In every mode a weight update
neither loses nor duplicates a call record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from consumers.trainer.weights import push_weights
from cua_stream.bus.reader import read_events, scan
from cua_stream.config import BusConfig
from cua_stream.engine.config import EngineConfig
from cua_stream.events import TurnEvent
from cua_stream.gateway.config import GatewayConfig
from cua_stream.topics import TURNS
from tests.conftest import free_port, wait_until
from tests.integration.gateway_servers import decode_rounds, serving

pytestmark = [pytest.mark.model, pytest.mark.kafka, pytest.mark.anyio]

CALLS = 3
LONG = 240
"""Tokens per call in flight: long enough that the update lands inside every one."""


def never_stopping(model_dir: Path, seed: int) -> Path:
    """Every call runs to its token budget, so every call is in flight when the update lands."""
    from cua_stream.models.tiny import make_tiny_model

    return make_tiny_model(model_dir, seed=seed, never_stops=True)


@pytest.fixture(scope="module")
def base_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return never_stopping(tmp_path_factory.mktemp("never-stopping-v0"), 0)


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return never_stopping(tmp_path_factory.mktemp("never-stopping-v1"), 1)


@pytest.fixture(scope="module")
def engine_url(base_weights: Path) -> Iterator[str]:
    """An engine of its own (the tests change its weights), in this process."""
    from cua_stream.engine.server import build_server

    # each decode round lasts at least 10 ms: LONG tokens take at least 2.4 s on any machine, so an update
    # sent once the calls decode lands inside every one
    config = EngineConfig(
        model_path=str(base_weights), port=free_port(), debug_history=256, step_latency_s=0.01
    )
    with serving(build_server(config)):
        yield f"http://127.0.0.1:{config.port}"


@pytest.fixture
def gateway_url(engine_url: str, base_weights: Path, bus_config: BusConfig, tmp_path: Path) -> Iterator[str]:
    from cua_stream.gateway.server import build_server

    config = GatewayConfig(
        model_path=str(base_weights), engine_url=engine_url, port=free_port(), blob_dir=str(tmp_path / "b")
    )
    with serving(build_server(config, bus_config)):
        yield f"http://127.0.0.1:{config.port}"


async def open_session(http: httpx.AsyncClient, gateway_url: str, episode: str) -> str:
    body = {
        "run_id": "run-modes",
        "group_id": "group-1",
        "episode_id": episode,
        "sampling": {"temperature": 1.0, "max_new_tokens": LONG},
    }
    r = await http.post(f"{gateway_url}/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def chat_body(i: int) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": f"Describe desktop number {i}."}],
        "max_tokens": LONG,
        "seed": 100 + i,
    }


async def until_generating(
    http: httpx.AsyncClient, engine_url: str, n: int, replies: dict[int, httpx.Response]
) -> None:
    """Until ``n`` requests run on the engine, each with tokens already (into their decode loops)."""

    async def running() -> bool:
        assert not replies, {i: r.text[:300] for i, r in replies.items()}  # none may end before
        return (await http.get(f"{engine_url}/health")).json()["running_requests"] >= n

    with anyio.fail_after(120):
        await wait_until(running, poll_s=0.05)
        await decode_rounds(http, engine_url, 2)


async def update_during_calls(
    mode: str, engine_url: str, gateway_url: str, weights: Path
) -> tuple[int, int, list[TurnEvent], dict[str, Any], list[str]]:
    """``CALLS`` long calls in flight, the weights updated under them in ``mode``, then one call more:
    (old version, new version, the records by call id order of the replies, the engine's request log,
    the replies' texts)."""
    async with httpx.AsyncClient(timeout=600) as http:
        old = int((await http.get(f"{engine_url}/get_model_info")).json()["weight_version"])
        sessions = [await open_session(http, gateway_url, f"{mode}-{i}") for i in range(CALLS + 1)]
        replies: dict[int, httpx.Response] = {}

        async def chat(i: int) -> None:
            url = f"{gateway_url}/sessions/{sessions[i]}/v1/chat/completions"
            replies[i] = await http.post(url, json=chat_body(i))

        async with anyio.create_task_group() as tg:
            for i in range(CALLS):
                tg.start_soon(chat, i)
            await until_generating(http, engine_url, CALLS, replies)
            await push_weights(
                http,
                engine_url=engine_url,
                gateway_url=gateway_url,
                weights=weights,
                version=old + 1,
                mode=mode,
            )
        await chat(CALLS)  # after the update
        assert all(r.status_code == 200 for r in replies.values()), [r.text for r in replies.values()]
        ids = [replies[i].json()["id"].removeprefix("chatcmpl-") for i in range(CALLS + 1)]
        texts = [replies[i].json()["choices"][0]["message"]["content"] for i in range(CALLS + 1)]
        seen = {r["rid"]: r for r in (await http.get(f"{engine_url}/debug/requests")).json()}
    return old, old + 1, ids, seen, texts


def weights_for(version: int, base_weights: Path, other_weights: Path) -> Path:
    return other_weights if version % 2 else base_weights


@pytest.mark.parametrize("mode", ["drain", "in_place", "retract"])
async def test_a_weight_update_in_each_mode_keeps_every_call_whole_and_recorded_once(
    mode: str,
    engine_url: str,
    gateway_url: str,
    bus_config: BusConfig,
    base_weights: Path,
    other_weights: Path,
) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        version = int((await http.get(f"{engine_url}/get_model_info")).json()["weight_version"])
    weights = weights_for(version + 1, base_weights, other_weights)
    old, new, call_ids, seen, texts = await update_during_calls(mode, engine_url, gateway_url, weights)

    records = [d.event for d in await read_events(bus_config, TURNS, CALLS + 1)]
    # no call recorded twice: the gateway makes a call's record durable before it replies, so with every
    # reply in, every record it made is on the topic
    assert len([d async for d in scan(bus_config, TURNS)]) == CALLS + 1
    by_id = {r.call_id: r for r in records}
    assert sorted(by_id) == sorted(call_ids)  # each call exactly once, no record without a reply

    in_flight, after = [by_id[c] for c in call_ids[:CALLS]], by_id[call_ids[CALLS]]
    assert [(s.version, s.start) for s in after.weight_versions] == [(new, 0)]
    for record in in_flight:
        assert record.finish_reason == "length" and len(record.completion_ids) == LONG  # whole
        assert len(record.completion_logprobs) == LONG
        versions = [s.version for s in record.weight_versions]
        spans = [(s.start, s.end) for s in record.weight_versions]
        if mode == "drain":  # finished on the old weights before the load
            assert versions == [old] and spans == [(0, LONG)]
            continue
        assert versions == [old, new], record.weight_versions  # both versions, in order, tiling it
        assert spans[0][0] == 0 and 0 < spans[0][1] == spans[1][0] < spans[1][1] == LONG
        assert record.policy_version == old  # the off-policy bound counts the oldest token
    if mode == "in_place":  # one engine request per call, generated straight through the update
        for record in in_flight:
            assert list(record.completion_ids) == seen[record.call_id]["output_ids"]
            assert f"{record.call_id}.r1" not in seen
    if mode == "retract":
        for i, record in enumerate(in_flight):
            first, rest = seen[record.call_id], seen[f"{record.call_id}.r1"]
            cut = record.weight_versions[0].end
            assert list(record.completion_ids[:cut]) == first["output_ids"]  # the aborted part
            assert rest["input_ids"] == first["input_ids"] + first["output_ids"]  # ... as a forced prefix
            assert list(record.completion_ids[cut:]) == rest["output_ids"]
            assert texts[i]  # one reply to the agent, of both parts


async def test_a_retracted_call_equals_one_call_of_its_prompt_and_first_part_forced(
    engine_url: str, gateway_url: str, bus_config: BusConfig, base_weights: Path, other_weights: Path
) -> None:
    """The continued part is what one call of (prompt + first part) with the call's sampling seed gives
    under the new weights: the same tokens and logprobs, one version."""
    async with httpx.AsyncClient(timeout=60) as http:
        version = int((await http.get(f"{engine_url}/get_model_info")).json()["weight_version"])
    weights = weights_for(version + 1, base_weights, other_weights)
    _, new, call_ids, seen, _ = await update_during_calls("retract", engine_url, gateway_url, weights)
    by_id = {d.event.call_id: d.event for d in await read_events(bus_config, TURNS, CALLS + 1)}
    record = by_id[call_ids[0]]
    first = seen[record.call_id]
    cut = record.weight_versions[0].end
    body = {
        "input_ids": first["input_ids"] + list(record.completion_ids[:cut]),
        "sampling_params": {**record.sampling, "max_new_tokens": LONG - cut},
        "return_logprob": True,
    }
    async with httpx.AsyncClient(timeout=600) as http:
        one = (await http.post(f"{engine_url}/generate", json=body)).json()
    assert one["output_ids"] == list(record.completion_ids[cut:])
    assert [lp for lp, _, _ in one["meta_info"]["output_token_logprobs"]] == pytest.approx(
        list(record.completion_logprobs[cut:]), abs=1e-5
    )
    assert one["meta_info"]["weight_versions"] == [{"version": str(new), "start": 0, "end": LONG - cut}]
