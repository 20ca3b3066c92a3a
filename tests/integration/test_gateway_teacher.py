"""Forced completions: a session with a teacher records the teacher's replies through the real path.

The bundled tasks' oracle (``cua_stream.tasks.policy_server``, over HTTP) is the teacher; requests go
through LiteLLM as computer-1 sends them; the reference engine scores the forced ids; the records are
read back from Kafka. A demonstration must be a call like a sampled one: the reply's ids and the
end-of-turn token as the completion, the policy's own logprob of each (what the tiny model computes
for them), and a next turn that extends it token for token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from cua_stream.bus.reader import read_events, scan
from cua_stream.config import BusConfig
from cua_stream.engine.forward import teacher_forced_logprobs
from cua_stream.engine.runner import ModelRunner
from cua_stream.events import TurnEvent
from cua_stream.gateway.config import GatewayConfig
from cua_stream.tasks.pages import layout
from cua_stream.tasks.policies import oracle_plan
from cua_stream.tasks.policy_server import create_app
from cua_stream.topics import TURNS
from tests.conftest import free_port
from tests.integration.gateway_servers import (
    EngineProcess,
    GatewayProcess,
    engine,
    gateway,
    serving,
    tiny_model_dir,
)
from tests.integration.test_gateway_engine import computer1_call, content_of
from tests.unit.gateway_support import screenshot_url, user_turn

__all__ = ["engine", "gateway", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.model, pytest.mark.kafka, pytest.mark.anyio]

TASK, SEED = "read-value", 3


@pytest.fixture
def teacher_gateway(engine: EngineProcess, bus_config: BusConfig, tmp_path: Path) -> Iterator[GatewayProcess]:
    from cua_stream.gateway.server import build_server

    policies = uvicorn.Server(uvicorn.Config(create_app(), port=free_port(), log_level="warning"))
    config = GatewayConfig(
        model_path=str(engine.model_dir),
        engine_url=engine.url,
        port=free_port(),
        blob_dir=str(tmp_path / "blobs"),
        teacher_url=f"http://127.0.0.1:{policies.config.port}/policies",
    )
    with serving(policies), serving(build_server(config, bus_config)):
        yield GatewayProcess(f"http://127.0.0.1:{config.port}", Path(config.blob_dir), bus_config)


async def open_session(gw: GatewayProcess, teacher: str | None) -> httpx.Response:
    body = {
        "run_id": "run-teach",
        "group_id": "g-teach",
        "episode_id": "ep-teach",
        "sampling": {"temperature": 1.0, "max_new_tokens": 96},
        "teacher": teacher,
    }
    return await gw.post("/sessions", json=body)


async def test_a_teacher_session_records_the_oracles_replies_as_the_policys_completions(
    teacher_gateway: GatewayProcess, engine: EngineProcess
) -> None:
    r = await open_session(teacher_gateway, f"oracle/{TASK}/{SEED}")
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    url = teacher_gateway.base_url(sid)
    messages = [user_turn("Read the value on the page and answer it.", screenshot_url(0, (640, 360)))]
    replies = []
    for i in range(2):  # the oracle answers, then confirms
        response = await computer1_call(url, messages, "agent_turn")
        replies.append(content_of(response))
        messages += [replies[-1], user_turn("", screenshot_url(i + 1, (640, 360)))]
    answer = oracle_plan(layout(TASK, SEED))[0].target
    assert all(f'"text": "{answer}"' in reply["content"] for reply in replies)

    turns = [d.event for d in await read_events(teacher_gateway.bus, TURNS, 2)]
    assert all(isinstance(t, TurnEvent) for t in turns)
    assert [t.episode_id for t in turns] == ["ep-teach", "ep-teach"]
    first, second = sorted(turns, key=lambda t: t.seq)
    assert second.parent_call_id == first.call_id  # the next turn extends the forced one, token for token
    runner = ModelRunner(str(engine.model_dir))
    for turn, reply in zip((first, second), replies, strict=True):
        ids = runner.tokenizer.encode(reply["content"], add_special_tokens=False)
        assert list(turn.completion_ids) == [*ids, runner.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        assert turn.finish_reason == "stop" and turn.policy_version == 0
    # the logprobs are the policy's own for the forced ids (the engine scored them; no image: the first
    # turn's prompt is text and one screenshot, scored here with the same pixels)
    pixels = runner.pixel_inputs([screenshot_url(0, (640, 360))])
    expected = teacher_forced_logprobs(
        runner.model,
        list(first.prompt_ids),
        list(first.completion_ids),
        temperature=1.0,
        pixel_values=pixels.pixel_values,
        image_grid_thw=pixels.image_grid_thw,
    )
    assert list(first.completion_logprobs) == pytest.approx(expected, abs=1e-4)
    assert max(expected) < 0  # a random policy finds the oracle's reply unlikely: the logprobs are real


async def test_teacher_sessions_are_refused_where_no_teacher_is_reachable(
    teacher_gateway: GatewayProcess,
) -> None:
    r = await open_session(teacher_gateway, "../admin")
    assert r.status_code == 400 and "teacher" in r.text
    r = await open_session(teacher_gateway, "oracle/no-such-task/1")
    sid = r.json()["session_id"]
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(
            f"{teacher_gateway.base_url(sid)}/chat/completions",
            json={"model": "m", "messages": [user_turn("hi")], "temperature": 1.0},
        )
    assert r.status_code == 502 and "teacher answered 404" in r.json()["error"]["message"]
    assert [d async for d in scan(teacher_gateway.bus, TURNS)] == []


async def test_a_gateway_without_a_teacher_refuses_a_teacher_session(gateway: GatewayProcess) -> None:
    r = await open_session(gateway, f"oracle/{TASK}/{SEED}")
    assert r.status_code == 400 and "gateway.teacher_url" in r.text
