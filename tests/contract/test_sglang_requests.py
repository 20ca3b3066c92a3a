"""What cua-stream sends an engine, parsed by SGLang 0.5.23's own request classes; what the reference
engine answers, checked against the keys SGLang writes.

The project's own code does the sending, over real HTTP, to the reference engine behind a recorder: the
gateway (sampled turns with screenshots, the next turn spliced from its parent's JSON, a teacher's forced
completion scored), its engine client's abort, and the trainer's weight pushes in every mode and its
served-version check. The recorded requests and replies then go to ``sglang_check.py``, run in SGLang's
own venv (``scripts/sglang-env.sh``; it cannot share cua-stream's), which judges them with SGLang's code.
Deliberately wrong bodies go with them, so a checker that accepted everything fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
import uvicorn

from consumers.trainer.weights import ENGINE_PAUSE_MODE, WEIGHT_UPDATE_MODES, engine_version, push_weights
from cua_stream.config import BusConfig
from cua_stream.engine.app import create_app as create_engine_app
from cua_stream.engine.config import EngineConfig
from cua_stream.engine.runner import ModelRunner
from cua_stream.gateway.config import GatewayConfig
from cua_stream.gateway.engine_client import EngineClient
from tests.conftest import _create_topics, free_port
from tests.integration.gateway_servers import serving, tiny_model_dir
from tests.unit.gateway_support import screenshot_url, user_turn

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.model, pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("sglang_check.py")
TEACHER = "oracle/read-value/3"

READS = [
    # parse_generate_response and parse_scored_response (cua_stream/gateway/engine_client.py)
    ("/generate", "text"),
    ("/generate", "output_ids"),
    ("/generate", "meta_info.output_token_logprobs"),
    ("/generate", "meta_info.input_token_logprobs"),
    ("/generate", "meta_info.finish_reason.type"),
    ("/generate", "meta_info.finish_reason.status_code"),
    ("/generate", "meta_info.finish_reason.message"),
    ("/generate", "meta_info.prompt_tokens"),
    ("/generate", "meta_info.weight_version"),
    ("/generate", "meta_info.weight_versions.version"),
    ("/generate", "meta_info.weight_versions.start"),
    ("/generate", "meta_info.weight_versions.end"),
    # consumers/trainer/weights.py: _load, engine_version; cua_stream/app/demo_run.py
    ("/update_weights_from_disk", "success"),
    ("/get_model_info", "weight_version"),
]
"""The reply keys the project reads, by route."""

NOT_SGLANG_SHAPED = ("/health", "/debug/")
"""Replies the project reads only the status of (/health), or the reference engine's own extensions."""


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int = 0
    reply: Any = None


@dataclass
class Recorder:
    """An ASGI wrapper that records every request body and reply of the app it wraps."""

    app: Callable[..., Awaitable[None]]
    seen: list[Exchange] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        exchange = Exchange(scope["method"], scope["path"], msgspec.json.decode(raw) if raw else None)
        self.seen.append(exchange)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:  # then what the client does next (a disconnect)
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        reply: list[bytes] = []

        async def record(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "http.response.body":
                reply.append(message.get("body", b""))
                if not message.get("more_body"):
                    exchange.reply = msgspec.json.decode(b"".join(reply)) if any(reply) else None
            await send(message)

        await self.app(scope, replay, record)


@dataclass
class Capture:
    exchanges: list[Exchange]
    vocab_size: int
    model_dir: Path


@pytest.fixture(scope="module")
def capture(tiny_model_dir: Path, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Capture:
    from cua_stream.gateway.server import build_server
    from cua_stream.tasks.policy_server import create_app as create_policy_app

    runner = ModelRunner(str(tiny_model_dir))
    recorder = Recorder(create_engine_app(EngineConfig(model_path=str(tiny_model_dir)), runner))
    engine = uvicorn.Server(uvicorn.Config(recorder, port=free_port(), log_level="warning", lifespan="off"))
    policies = uvicorn.Server(uvicorn.Config(create_policy_app(), port=free_port(), log_level="warning"))
    bus = BusConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=f"t-{uuid.uuid4().hex[:10]}")
    anyio.run(_create_topics, bus)
    engine_url = f"http://127.0.0.1:{engine.config.port}"
    config = GatewayConfig(
        model_path=str(tiny_model_dir),
        engine_url=engine_url,
        port=free_port(),
        blob_dir=str(tmp_path_factory.mktemp("blobs")),
        teacher_url=f"http://127.0.0.1:{policies.config.port}/policies",
    )
    with serving(engine), serving(policies), serving(build_server(config, bus)):
        anyio.run(_drive, engine_url, f"http://127.0.0.1:{config.port}", tiny_model_dir)
    return Capture(recorder.seen, runner.model.config.text_config.vocab_size, tiny_model_dir)


async def _drive(engine_url: str, gateway_url: str, weights: Path) -> None:
    """Every kind of request the project sends an engine, sent by the project's own code."""
    async with httpx.AsyncClient(timeout=120) as http:
        # Sampled turns with screenshots: the gateway renders them and calls /generate; the second turn's
        # ids and images are spliced from the first's JSON. Every sampling parameter a session or a chat
        # request can set is set.
        sampling = {"temperature": 1.0, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "max_new_tokens": 12}
        sampling |= {"stop": ["\n\n\n"], "stop_token_ids": [151643]}
        sid = await _session(http, gateway_url, sampling)
        messages = [user_turn("Open the settings page.", screenshot_url(0))]
        extra = {"seed": 7, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
        for i in range(2):
            reply = await _chat(http, gateway_url, sid, messages, max_tokens=8, **extra)
            messages += [reply, user_turn("", screenshot_url(i + 1))]
        # A teacher's forced completion, scored by the engine (max_new_tokens=0, logprob_start_len).
        sid = await _session(http, gateway_url, {"temperature": 1.0, "max_new_tokens": 96}, teacher=TEACHER)
        await _chat(http, gateway_url, sid, [user_turn("Read the value and answer it.", screenshot_url(0))])
        # The engine client's abort of a call it gives up on.
        client = EngineClient(engine_url)
        await client.abort("call-given-up")
        assert (await client.health())[0]
        await client.aclose()
        # The trainer's weight pushes, in every mode (the gateway drained or told around them), and its
        # check of the version the engine serves.
        for version, mode in enumerate(WEIGHT_UPDATE_MODES, 1):
            await push_weights(
                http,
                engine_url=engine_url,
                gateway_url=gateway_url,
                weights=weights,
                version=version,
                mode=mode,
            )
        assert await engine_version(http, engine_url) == str(len(WEIGHT_UPDATE_MODES))


async def _session(http: httpx.AsyncClient, gateway_url: str, sampling: dict[str, Any], **extra: Any) -> str:
    body = {"run_id": "run-sgl", "group_id": "g-1", "episode_id": f"ep-{uuid.uuid4().hex[:6]}"}
    r = await http.post(f"{gateway_url}/sessions", json={**body, "sampling": sampling, **extra})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


async def _chat(
    http: httpx.AsyncClient, gateway_url: str, sid: str, messages: list[Any], **extra: Any
) -> dict[str, Any]:
    body = {"model": "policy", "messages": messages, "temperature": 1.0, **extra}
    r = await http.post(f"{gateway_url}/sessions/{sid}/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]}


# ---- the checker, in SGLang's venv ----


@pytest.fixture(scope="session")
def sglang_python() -> str:
    """SGLang's venv (scripts/test.sh makes it before the tests: CUA_SGLANG_PYTHON); made here otherwise."""
    given = os.environ.get("CUA_SGLANG_PYTHON")
    if given:
        return given
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/sglang-env.sh")], capture_output=True, text=True, timeout=1500
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.fail(f"SGLang's venv could not be made ({why}): run bash scripts/sglang-env.sh", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


MUTANTS = [
    ("unknown key", "/generate", lambda b: {**b, "sampling_seed": 3}),
    ("ids as a string", "/generate", lambda b: {**b, "input_ids": ",".join(map(str, b["input_ids"]))}),
    ("OpenAI's seed", "/generate", lambda b: {**b, "sampling_params": {**b["sampling_params"], "seed": 1}}),
    ("scored past the input", "/generate", lambda b: {**b, "logprob_start_len": len(b["input_ids"]) + 1}),
    ("not an image", "/generate", lambda b: {**b, "image_data": ["bm90IGFuIGltYWdl"]}),
    ("no model_path", "/update_weights_from_disk", lambda b: {"weight_version": b["weight_version"]}),
    ("a mode SGLang lacks", "/pause_generation", lambda b: {"mode": "freeze"}),
]
"""Deliberately wrong versions of captured bodies: each must be refused, or the check proves nothing."""


def _requests(exchanges: list[Exchange]) -> list[dict[str, Any]]:
    """What the project sent, SGLang's third pause mode (the project sends abort and in_place, see
    ENGINE_PAUSE_MODE; retract must parse all the same), and the mutants of captured bodies."""
    sent = [e for e in exchanges if e.body is not None or e.method == "GET"]
    requests = [
        {"name": f"sent {i}", "method": e.method, "path": e.path, "body": e.body} for i, e in enumerate(sent)
    ]
    requests.append({"name": "mode retract", "path": "/pause_generation", "body": {"mode": "retract"}})
    for name, path, mutate in MUTANTS:
        base = next(
            e.body for e in sent if e.path == path and (path != "/generate" or "image_data" in e.body)
        )
        requests.append({"name": f"mutant: {name}", "path": path, "body": mutate(base)})
    return requests


def _responses(exchanges: list[Exchange]) -> list[dict[str, Any]]:
    """The reference engine's SGLang-shaped replies, and two mutants: a key SGLang never writes, and a
    scored reply that gives the first input token a logprob (SGLang leaves it null)."""
    responses = [
        {"name": f"reply {i}", "path": e.path, "body": e.reply}
        for i, e in enumerate(exchanges)
        if e.status == 200 and not e.path.startswith(NOT_SGLANG_SHAPED)
    ]
    generated = next(r["body"] for r in responses if r["path"] == "/generate")
    unwritten = {**generated, "meta_info": {**generated["meta_info"], "retractions": 1}}
    scored = next(r["body"] for r in responses if "input_token_logprobs" in r["body"].get("meta_info", {}))
    first, *rest = scored["meta_info"]["input_token_logprobs"]
    meta = {**scored["meta_info"], "input_token_logprobs": [[-1.0, *first[1:]], *rest]}
    return [
        *responses,
        {"name": "mutant: unwritten key", "path": "/generate", "body": unwritten},
        {
            "name": "mutant: first input token scored",
            "path": "/generate",
            "body": {**scored, "meta_info": meta},
        },
    ]


@pytest.fixture(scope="module")
def verdict(capture: Capture, sglang_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    requests, responses = _requests(capture.exchanges), _responses(capture.exchanges)
    reads = [{"path": p, "key": k} for p, k in [*READS, ("/generate", "meta_info.retractions")]]
    capture_file = tmp_path_factory.mktemp("sglang") / "capture.json"
    capture_file.write_text(json.dumps({"requests": requests, "responses": responses, "reads": reads}))
    model = ["--vocab-size", str(capture.vocab_size), "--tokenizer", str(capture.model_dir)]
    done = subprocess.run(
        [sglang_python, str(CHECKER), str(capture_file), *model],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _failed(items: list[dict[str, Any]], mutants: bool) -> list[str]:
    return [
        f"{v.get('name') or v.get('key')} {v['path']}: {v['problems']}"
        for v in items
        if v.get("name", "").startswith("mutant") == mutants and not v["ok"]
    ]


def test_every_request_the_project_sends_parses_in_sglang_with_no_key_dropped(
    capture: Capture, verdict: dict[str, Any]
) -> None:
    assert verdict["sglang"] == "0.5.23"
    assert _failed(verdict["requests"], mutants=False) == []
    sent = {(e.method, e.path) for e in capture.exchanges}
    for route in ("/generate", "/abort_request", "/update_weights_from_disk", "/pause_generation"):
        assert ("POST", route) in sent
    assert {("POST", "/continue_generation"), ("GET", "/get_model_info"), ("GET", "/health")} <= sent
    generates = [e.body for e in capture.exchanges if e.path == "/generate"]
    assert any(b.get("image_data") for b in generates)  # screenshots went with the ids
    assert any(b["sampling_params"].get("max_new_tokens") == 0 for b in generates)  # the teacher's scoring
    assert any({"top_k", "top_p", "min_p", "sampling_seed"} <= set(b["sampling_params"]) for b in generates)
    modes = {e.body["mode"] for e in capture.exchanges if e.path == "/pause_generation"}
    assert modes == set(ENGINE_PAUSE_MODE.values())


def test_the_reference_engine_answers_in_the_keys_sglang_writes(verdict: dict[str, Any]) -> None:
    assert {r["path"] for r in verdict["responses"]} >= {
        "/generate",
        "/update_weights_from_disk",
        "/get_model_info",
    }
    assert _failed(verdict["responses"], mutants=False) == []


def test_every_reply_key_the_project_reads_is_one_sglang_writes(verdict: dict[str, Any]) -> None:
    reads = [r for r in verdict["reads"] if r["key"] != "meta_info.retractions"]
    assert [f"{r['path']} {r['key']}: {r['problems']}" for r in reads if not r["ok"]] == []
    assert all(r["written_at"].startswith("sglang/") for r in reads)


def test_the_checker_refuses_wrong_bodies_and_keys(verdict: dict[str, Any]) -> None:
    mutants = [v for v in verdict["requests"] + verdict["responses"] if v["name"].startswith("mutant")]
    assert len(mutants) == len(MUTANTS) + 2
    assert [v["name"] for v in mutants if v["ok"]] == []
    (read,) = [r for r in verdict["reads"] if r["key"] == "meta_info.retractions"]
    assert not read["ok"]
