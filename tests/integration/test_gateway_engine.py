"""The session gateway and the reference engine over real HTTP, with the tiny Qwen3-VL and real Kafka.

Requests are sent through LiteLLM exactly as computer-1 sends them (``openai/<name>``, api_base = the
session URL, no system message, screenshots as image_url data-URL parts, ``prompt_cache_key`` and the
call-kind marker as top-level fields), and the records are read back from the broker.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.reader import read_events
from cua_stream.config import BusConfig
from cua_stream.events import CallKind, SummaryEvent, TurnEvent
from cua_stream.procs import child
from cua_stream.topics import SUMMARIES, TURNS
from tests.conftest import free_port
from tests.integration.gateway_servers import (
    EngineProcess,
    GatewayProcess,
    engine,
    gateway,
    tiny_model_dir,
)
from tests.unit.gateway_support import chain, screenshot_url, user_turn

__all__ = ["engine", "gateway", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.model, pytest.mark.kafka, pytest.mark.anyio]

SCREEN = (640, 360)
TASK = (
    "You are operating a computer through screenshots. The display is 640x360 pixels. Answer with one JSON "
    'object {"analysis": ..., "plan": ..., "action": {...}}. Coordinates are raw desktop pixels.\n\n'
    "Task: open the settings page and enable dark mode."
)


async def computer1_call(
    base_url: str, messages: list[dict[str, Any]], kind: str | None, **extra: Any
) -> Any:
    """One LiteLLM request shaped like computer-1's in Harbor 0.26.0 (its message layout and kwargs)."""
    import litellm

    kwargs: dict[str, Any] = {
        "model": "openai/tiny-qwen3-vl",
        "api_base": base_url,
        "api_key": "gateway-key",
        "messages": messages,
        "temperature": 1.0,
        "prompt_cache_key": "computer-1-" + uuid.uuid4().hex[:8],
        "drop_params": True,
        "max_tokens": 96,
        "max_retries": 0,
        **extra,
    }
    if kind is not None:
        kwargs["cua_call_kind"] = kind
    return await litellm.acompletion(**kwargs)


def content_of(response: Any) -> dict[str, Any]:
    assert response.choices[0].finish_reason == "stop"
    return {"role": "assistant", "content": response.choices[0].message.content}


async def run_turns(gw: GatewayProcess, sid: str, n: int, first: int = 0) -> list[dict[str, Any]]:
    messages = [user_turn(TASK, screenshot_url(first, SCREEN))]
    for i in range(1, n + 1):
        response = await computer1_call(gw.base_url(sid), messages, "agent_turn")
        messages += [content_of(response), user_turn("", screenshot_url(first + i, SCREEN))]
    return messages


def by_seq(deliveries: list[Any]) -> list[Any]:
    return sorted((d.event for d in deliveries), key=lambda e: e.seq)


async def assert_chains_into_engine_io(events: list[Any], engine: EngineProcess) -> None:
    seen = await engine.recent()
    full = chain(events)
    for event in events:
        io_ = seen[event.call_id]
        assert list(event.completion_ids) == io_["output_ids"]
        assert full[event.call_id] == [*io_["input_ids"], *io_["output_ids"]]


@contextmanager
def gateway_cli(engine: EngineProcess, bus: BusConfig, tmp_path: Path) -> Iterator[GatewayProcess]:
    """``cua-stream gateway`` as its own process, as an operator would run it."""
    port = free_port()
    args = ["gateway", "--model-path", str(engine.model_dir), "--engine-url", engine.url, "--port", str(port)]
    args += [
        "--blob-dir",
        str(tmp_path / "blobs"),
        "--bootstrap",
        bus.bootstrap_servers,
        "--prefix",
        bus.topic_prefix,
    ]
    url = f"http://127.0.0.1:{port}"
    with child(args, f"{url}/health", tmp_path / "gateway.log"):
        yield GatewayProcess(url, tmp_path / "blobs", bus)


async def test_six_computer1_turns_chain_exactly_into_the_engine_io(
    engine: EngineProcess, bus_config: BusConfig, tmp_path: Path
) -> None:
    with gateway_cli(engine, bus_config, tmp_path) as gw:
        sid = await gw.session()
        await run_turns(gw, sid, 6)
        info = await gw.info(sid)
    events: list[TurnEvent] = by_seq(await read_events(bus_config, TURNS, 6))
    assert [e.seq for e in events] == list(range(6))
    assert events[0].parent_call_id is None
    assert [e.parent_call_id for e in events[1:]] == [e.call_id for e in events[:-1]]
    assert all(e.kind is CallKind.AGENT_TURN and e.finish_reason == "stop" for e in events)
    await assert_chains_into_engine_io(events, engine)
    blobs = LocalBlobStore(gw.blob_dir)
    for i, event in enumerate(events):
        (image,) = event.images  # only the screenshot new to this turn
        assert blobs.get(image.sha256) == _screenshot_bytes(i)
        assert (image.width, image.height, image.mime, image.grid_thw) == (
            640,
            360,
            "image/webp",
            (1, 22, 40),
        )
        assert len(event.completion_logprobs) == len(event.completion_ids) > 0
        assert event.policy_version == 0 and event.sampling["temperature"] == 1.0
    assert info["n_calls"] == 6 and info["statuses"] == [] and info["calls_without_kind"] == 0
    assert info["tito_mismatch"]["checked"] == 1 and info["tito_mismatch"]["strict_mismatches"] == 0


async def test_compaction_summary_is_a_summary_event_and_the_reset_is_a_new_root(
    engine: EngineProcess, gateway: GatewayProcess, bus_config: BusConfig
) -> None:
    sid = await gateway.session()
    history = await run_turns(gateway, sid, 2)
    url = gateway.base_url(sid)
    summary_prompt = user_turn("Summarize what was accomplished, the current state and the next steps.")
    summary = content_of(await computer1_call(url, [*history, summary_prompt], "compaction_summary"))
    short = await computer1_call(
        url, [user_turn("Recent state: ... Summarize in 2-3 sentences.")], "compaction_short_summary"
    )
    reset = [
        user_turn(TASK),
        user_turn(f"Summary of previous work: {summary['content']}"),
        {"role": "assistant", "content": "Understood, continuing."},
        user_turn("Continue from the summary above.", screenshot_url(7, SCREEN)),
    ]
    after = content_of(await computer1_call(url, reset, "agent_turn"))
    await computer1_call(url, [*reset, after, user_turn("", screenshot_url(8, SCREEN))], "agent_turn")
    assert short.choices[0].message.content is not None

    turns: list[TurnEvent] = by_seq(await read_events(bus_config, TURNS, 4))
    summaries: list[SummaryEvent] = by_seq(await read_events(bus_config, SUMMARIES, 2))
    assert [s.kind for s in summaries] == [CallKind.COMPACTION_SUMMARY, CallKind.COMPACTION_SHORT_SUMMARY]
    assert summaries[0].parent_call_id == turns[1].call_id  # the full summary extends the conversation
    assert summaries[1].parent_call_id is None
    assert turns[2].parent_call_id is None  # the history reset is a new root ...
    assert turns[3].parent_call_id == turns[2].call_id  # ... that the next turn extends
    assert sorted(e.seq for e in [*turns, *summaries]) == list(range(6))
    await assert_chains_into_engine_io([*turns, *summaries], engine)
    info = await gateway.info(sid)
    assert (info["n_turns"], info["n_summaries"]) == (4, 2)


async def test_engine_logprobs_equal_a_teacher_forced_recompute_and_pixels_rebuild_from_blobs(
    engine: EngineProcess, gateway: GatewayProcess, bus_config: BusConfig
) -> None:
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from cua_stream.engine.forward import teacher_forced_logprobs

    sid = await gateway.session()
    await run_turns(gateway, sid, 3, first=20)
    events: list[TurnEvent] = by_seq(await read_events(bus_config, TURNS, 3))
    seen = await engine.recent()
    blobs = LocalBlobStore(gateway.blob_dir)
    processor = AutoProcessor.from_pretrained(engine.model_dir)
    model = AutoModelForImageTextToText.from_pretrained(engine.model_dir, dtype=torch.float32).eval()
    full = chain(events)
    by_id = {e.call_id: e for e in events}
    for event in events:
        lineage = [event]
        while lineage[0].parent_call_id:
            lineage.insert(0, by_id[lineage[0].parent_call_id])
        refs = [ref for e in lineage for ref in e.images]
        images = [Image.open(io.BytesIO(blobs.get(ref.sha256))) for ref in refs]
        pixels = processor.image_processor(images=images, return_tensors="pt")
        grid = pixels["image_grid_thw"]
        consumed = seen[event.call_id]
        assert grid.tolist() == consumed["image_grid_thw"] == [list(r.grid_thw) for r in refs]
        digest = hashlib.sha256(pixels["pixel_values"].float().contiguous().numpy().tobytes()).hexdigest()
        assert digest == consumed["pixel_values_sha256"]
        prompt = full[event.call_id][: -len(event.completion_ids)]
        recomputed = teacher_forced_logprobs(
            model,
            prompt,
            list(event.completion_ids),
            temperature=event.sampling["temperature"],
            pixel_values=pixels["pixel_values"],
            image_grid_thw=grid,
        )
        assert recomputed == pytest.approx(list(event.completion_logprobs), abs=1e-4)


async def test_every_refusal_over_http(
    engine: EngineProcess, gateway: GatewayProcess, bus_config: BusConfig
) -> None:
    import litellm

    sid = await gateway.session(temperature=1.0)
    url = gateway.base_url(sid)
    first = [user_turn(TASK, screenshot_url(30, SCREEN))]

    with pytest.raises(litellm.BadRequestError) as bad:
        await computer1_call(url, first, "agent_turn", temperature=0.7)
    assert "temperature=0.7" in str(bad.value) and "temperature=1.0" in str(bad.value)

    r = await gateway.post(
        f"/sessions/{sid}/v1/chat/completions", json={"messages": first, "input_ids": [1, 2]}
    )
    assert r.status_code == 400 and "input_ids" in r.text

    # a one-token reply is cut by length unless that token is <|im_end|>; seeds make it reproducible
    for attempts in range(1, 20):
        cut = await computer1_call(url, first, "agent_turn", max_tokens=1, seed=9 + attempts)
        if cut.choices[0].finish_reason == "length":
            break
    assert cut.choices[0].finish_reason == "length"
    extend = [*first, {"role": "assistant", "content": cut.choices[0].message.content}, user_turn("go on")]
    with pytest.raises(litellm.APIError) as conflict:
        await computer1_call(url, extend, "agent_turn")
    assert getattr(conflict.value, "status_code", None) == 409

    with pytest.raises(litellm.NotFoundError):
        await computer1_call(gateway.base_url("no-such-session"), first, "agent_turn")

    # an engine error passes through unrecorded: the reference engine does not implement penalties
    with pytest.raises(litellm.BadRequestError) as passed:
        await computer1_call(url, first, "agent_turn", frequency_penalty=0.5)
    assert "frequency_penalty" in str(passed.value)

    drained = (await gateway.post("/admin/drain", json={"timeout_s": 30})).json()
    assert drained == {"draining": True, "in_flight": 0, "idle": True}
    with pytest.raises(litellm.ServiceUnavailableError):
        await computer1_call(url, first, "agent_turn")
    await gateway.post("/admin/resume")
    ok = await computer1_call(url, first, "agent_turn")
    assert ok.choices[0].message.content is not None

    info = await gateway.info(sid)
    assert info["statuses"] == [400, 400, 409, 400, 503]
    assert info["n_calls"] == attempts + 1  # the one-token calls and the last one; no refusal recorded
    events = by_seq(await read_events(bus_config, TURNS, attempts + 1))
    assert events[attempts - 1].finish_reason == "length"
    assert [e.seq for e in events] == list(range(attempts + 1))


def _screenshot_bytes(i: int) -> bytes:
    from tests.unit.gateway_support import screenshot_bytes

    return screenshot_bytes(i, SCREEN)
