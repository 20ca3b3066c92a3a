"""Whole computer-1 episodes through the binding, on the wire: real Harbor 0.26.0, real HTTP.

One module fixture runs five episodes concurrently (computer-1's setup sleeps 2.5 s, so running them
together keeps the module fast), each against its own recording server:

- ``ours``: our binding, with a context limit small enough that the second turn compacts (the full
  summary is refused as too long, so Harbor also sends the short summary) and a turn cap of 2 from
  ``HARBOR_AGENT_MAX_ITERATIONS``, so the episode ends without an answer and the final-answer fallback
  runs. Every call site shows up once or more.
- ``second``: another ``Qwen3VLComputer1`` for the same served model in the same process, on a sandbox
  without ``cwebp`` (Harbor then reads back PNG bytes from a ``.webp`` file).
- ``default``: the binding the source PR replaced (registered name, no api_base, no temperature, key in
  ``llm_kwargs``, vision left to litellm's metadata). ``OPENAI_BASE_URL`` points at a decoy server that
  stands for OpenAI's endpoint, and an ambient ``OPENAI_API_KEY`` is set, as on a developer machine.
- ``call_kwargs_only``: our config with the request args moved to ``llm_call_kwargs``.
- ``extra_body_marker``: our config with the agent-turn marker inside ``llm_call_kwargs["extra_body"]``.

The ambient ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` are set for all five, so ``ours`` also shows that the
binding's endpoint and key win over them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harbor.agents.base import BaseAgent
from harbor.agents.computer_1.computer_1 import Computer1
from harbor.agents.factory import AgentFactory
from harbor.models.agent.context import AgentContext
from harbor.models.trial.config import AgentConfig
from PIL import Image

from cua_stream.binding.computer1 import Computer1Params, ServedModel, bind_computer1
from cua_stream.binding.qwen3vl import AGENT_NAME, Qwen3VLComputer1
from cua_stream.config import Secret
from cua_stream.events import CALL_KIND_FIELD, CallKind
from tests.contract.computer1_harness import CLICK_CENTRE, RecordingSandbox, Request, SessionServer

pytestmark = pytest.mark.harbor

TRAINING_TEMPERATURE = 1.0  # anything but Harbor's default 0.7
SESSION_KEY = Secret("sk-session-" + uuid.uuid4().hex)
AMBIENT_KEY = "sk-ambient-developer-key"
# Unique per run: litellm's model table is process-wide and these tests must not meet other registrations.
SERVED = ServedModel(
    name=f"qwen3-vl-contract-{uuid.uuid4().hex[:8]}", max_input_tokens=9000, max_output_tokens=512
)
REQUEST_ARGS: dict[str, Any] = {
    "temperature": TRAINING_TEMPERATURE,
    "top_p": 0.95,
    "top_k": 20,
    "max_tokens": 512,
    "stop_token_ids": [151645],
    "reasoning_effort": "low",
    "extra_body": {"skip_special_tokens": False},
}
# What every request must carry: the plain request args, and extra_body's fields top-level.
WIRE_ARGS = {
    "top_p": 0.95,
    "top_k": 20,
    "max_tokens": 512,
    "stop_token_ids": [151645],
    "skip_special_tokens": False,
}
DESKTOP = (1366, 768)  # neither side on Qwen3-VL's 32-pixel grid, and over the default pixel cap once rounded


def params(server: SessionServer, name: str) -> Computer1Params:
    return Computer1Params(
        session_url=server.url(f"/sessions/{name}/v1"),
        session_key=SESSION_KEY,
        temperature=TRAINING_TEMPERATURE,
        model=SERVED,
        request_args=REQUEST_ARGS,
    )


@dataclass
class Episode:
    agent: BaseAgent
    sandbox: RecordingSandbox
    requests: list[Request]
    logs_dir: Path


async def run_episode(config: AgentConfig, sandbox: RecordingSandbox, logs_dir: Path) -> BaseAgent:
    # What Harbor's Trial does with an AgentConfig, minus the task and verifier around it.
    agent = AgentFactory.create_agent_from_config(config, logs_dir=logs_dir)
    await agent.setup(sandbox)  # type: ignore[arg-type]  # the sandbox double speaks exec only
    await agent.run("Find the answer on the page.", sandbox, AgentContext())  # type: ignore[arg-type]
    return agent


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    names = ["ours", "second", "default", "call_kwargs_only", "extra_body_marker"]
    collect = _Collect()
    root = logging.getLogger()
    with contextlib.ExitStack() as stack, pytest.MonkeyPatch.context() as mp:
        servers = {name: stack.enter_context(SessionServer()) for name in [*names, "decoy"]}
        mp.setenv("OPENAI_BASE_URL", servers["decoy"].url())
        mp.setenv("OPENAI_API_KEY", AMBIENT_KEY)
        root.addHandler(collect)
        try:
            ours = bind_computer1(
                params(servers["ours"], "ours"),
                {
                    "HARBOR_AGENT_MAX_ITERATIONS": "2",
                    "HARBOR_CUA_DESKTOP_WIDTH": str(DESKTOP[0]),
                    "HARBOR_CUA_DESKTOP_HEIGHT": str(DESKTOP[1]),
                },
            ).trial_agent_config()
            second = bind_computer1(
                params(servers["second"], "second"), {"HARBOR_AGENT_MAX_ITERATIONS": "1"}
            ).trial_agent_config()
            plain_args = {
                k: v for k, v in REQUEST_ARGS.items() if k not in ("temperature", "reasoning_effort")
            }
            default = AgentConfig(
                name="computer-1",
                import_path="cua_stream.binding.qwen3vl:Qwen3VLComputer1",
                model_name=f"openai/{SERVED.name}-default",
                kwargs={
                    "provider": "litellm",
                    "model_info": {"max_input_tokens": SERVED.max_input_tokens},
                    "max_turns": 1,
                    "llm_kwargs": {**plain_args, "api_key": SESSION_KEY.reveal()},
                },
            )
            ours_kwargs = ours.kwargs
            moved = bind_computer1(params(servers["call_kwargs_only"], "moved"), {}).trial_agent_config()
            moved.kwargs.update(
                max_turns=2,
                llm_kwargs={},
                llm_call_kwargs={**ours_kwargs["llm_kwargs"], **ours_kwargs.get("llm_call_kwargs", {})},
            )
            in_extra = bind_computer1(params(servers["extra_body_marker"], "extra"), {}).trial_agent_config()
            in_extra.kwargs.update(
                max_turns=1, llm_call_kwargs={"extra_body": {CALL_KIND_FIELD: CallKind.AGENT_TURN.value}}
            )
            configs = {
                "ours": (ours, RecordingSandbox(*DESKTOP)),
                "second": (second, RecordingSandbox(1024, 900, cwebp=False)),
                "default": (default, RecordingSandbox(1024, 900)),
                "call_kwargs_only": (moved, RecordingSandbox(1024, 900)),
                "extra_body_marker": (in_extra, RecordingSandbox(1024, 900)),
            }
            dirs = {name: tmp_path_factory.mktemp(name) for name in names}

            async def run_all() -> list[BaseAgent]:
                # A binding that lost its turn cap would loop for Harbor's 1,000,000 turns: fail fast.
                return await asyncio.wait_for(
                    asyncio.gather(
                        *(run_episode(cfg, sandbox, dirs[name]) for name, (cfg, sandbox) in configs.items())
                    ),
                    timeout=90,
                )

            agents = dict(zip(names, asyncio.run(run_all()), strict=True))
        finally:
            root.removeHandler(collect)
    result: dict[str, Any] = {
        name: Episode(agents[name], configs[name][1], servers[name].requests, dirs[name]) for name in names
    }
    result["decoy"] = servers["decoy"].requests
    result["log_lines"] = collect.lines
    return result


def kinds(requests: list[Request]) -> list[str]:
    return [r.site for r in requests]


# ---------------------------------------------------------------------------------------------------
# The scenario itself: every call site happened, in Harbor's order


def test_ours_exercises_every_call_site(episodes: dict[str, Any]) -> None:
    # Turn 1; turn 2 compacts first (full summary refused -> short summary); the cap ends the episode
    # without an answer, so the fallback asks for one.
    assert kinds(episodes["ours"].requests) == [
        "agent_turn",
        "compaction_summary",
        "compaction_short_summary",
        "agent_turn",
        "final_answer",
    ]
    assert episodes["ours"].agent._compactor.compaction_count == 1
    answer = episodes["ours"].sandbox.files["/logs/agent/final_answer.txt"]
    assert answer == b"No answer found."


# ---------------------------------------------------------------------------------------------------
# The five failures of the default binding, and the same properties with ours


def test_requests_reach_the_session_url_not_the_default_endpoint(episodes: dict[str, Any]) -> None:
    ours = episodes["ours"].requests
    assert ours and {r.path for r in ours} == {"/sessions/ours/v1/chat/completions"}
    # The default binding has no api_base: its requests go to whatever "OpenAI" resolves to (the decoy).
    assert episodes["default"].requests == []
    assert episodes["decoy"], "the default binding's requests should have reached the default endpoint"


def test_session_key_authenticates_every_request(episodes: dict[str, Any]) -> None:
    for request in episodes["ours"].requests:
        assert request.headers["authorization"] == f"Bearer {SESSION_KEY.reveal()}"
    # A key in llm_kwargs loses to any key Harbor resolves itself, here the ambient OPENAI_API_KEY.
    assert {r.headers["authorization"] for r in episodes["decoy"]} == {f"Bearer {AMBIENT_KEY}"}


def test_every_request_carries_the_training_temperature(episodes: dict[str, Any]) -> None:
    assert {r.body["temperature"] for r in episodes["ours"].requests} == {TRAINING_TEMPERATURE}
    assert {r.body["temperature"] for r in episodes["decoy"]} == {0.7}


def test_the_class_built_is_qwen3vl_computer1(episodes: dict[str, Any]) -> None:
    agent = episodes["ours"].agent
    assert type(agent) is Qwen3VLComputer1
    trajectory = (episodes["ours"].logs_dir / "trajectory.json").read_text()
    assert f'"name": "{AGENT_NAME}"' in trajectory
    # A registered name wins over the import path.
    assert type(episodes["default"].agent) is Computer1


def test_two_agents_in_one_process_both_send_images(episodes: dict[str, Any]) -> None:
    for name in ("ours", "second"):
        turns = [r for r in episodes[name].requests if r.site == "agent_turn"]
        assert turns and all(r.image_urls() for r in turns), name


# ---------------------------------------------------------------------------------------------------
# Request args: llm_kwargs on every call site, llm_call_kwargs on the agent loop only


def test_request_args_reach_every_call_site(episodes: dict[str, Any]) -> None:
    for request in episodes["ours"].requests:
        sent = {name: request.body.get(name) for name in WIRE_ARGS}
        assert sent == WIRE_ARGS, request.site
        assert "extra_body" not in request.body  # its fields arrive top-level


def test_call_kwargs_reach_the_agent_loop_only(episodes: dict[str, Any]) -> None:
    # Moving the request args to llm_call_kwargs loses them on every call but the agent loop's.
    requests = episodes["call_kwargs_only"].requests
    assert set(kinds(requests)) == {
        "agent_turn",
        "compaction_summary",
        "compaction_short_summary",
        "final_answer",
    }
    for request in requests:
        has_args = all(name in request.body for name in WIRE_ARGS)
        assert has_args == (request.site == "agent_turn"), request.site


def test_extra_body_in_call_kwargs_replaces_the_request_args_extra_body(episodes: dict[str, Any]) -> None:
    # Why the marker is a top-level field: an extra_body in llm_call_kwargs wipes the request args' one.
    turns = [r for r in episodes["extra_body_marker"].requests if r.site == "agent_turn"]
    assert turns and all("skip_special_tokens" not in r.body for r in turns)
    assert all(r.body[CALL_KIND_FIELD] == CallKind.AGENT_TURN.value for r in turns)


def test_reasoning_effort_from_the_request_args_reaches_every_request(episodes: dict[str, Any]) -> None:
    assert {r.body.get("reasoning_effort") for r in episodes["ours"].requests} == {"low"}


# ---------------------------------------------------------------------------------------------------
# Call-kind markers


@pytest.mark.parametrize("name", ["ours", "second"])
def test_every_request_is_marked_with_its_call_site(episodes: dict[str, Any], name: str) -> None:
    requests = episodes[name].requests
    assert requests
    for request in requests:
        assert request.body.get(CALL_KIND_FIELD) == request.site


# ---------------------------------------------------------------------------------------------------
# Desktop, coordinates and screenshots


def test_env_vars_set_turn_cap_and_desktop(episodes: dict[str, Any]) -> None:
    ours = episodes["ours"]
    assert sum(r.site == "agent_turn" for r in ours.requests) == 2
    assert ours.agent._early_termination_reason == "max_turns_reached"
    commands = "\n".join(ours.sandbox.commands)
    assert f"Xvfb :1 -screen 0 {DESKTOP[0]}x{DESKTOP[1]}x24" in commands
    assert f"--window-size={DESKTOP[0]},{DESKTOP[1]}" in commands


def test_normalized_click_lands_on_desktop_pixels(episodes: dict[str, Any]) -> None:
    x, y = CLICK_CENTRE["action"]["x"], CLICK_CENTRE["action"]["y"]
    expected = f"mousemove {round(x * (DESKTOP[0] - 1) / 999)} {round(y * (DESKTOP[1] - 1) / 999)} click 1"
    clicks = [c for c in episodes["ours"].sandbox.xdotool() if "click" in c]
    assert clicks and all(expected in c for c in clicks), clicks


def test_prompt_states_the_normalized_grid(episodes: dict[str, Any]) -> None:
    first = episodes["ours"].requests[0].prompt_text
    assert "0-999 grid" in first
    assert "raw desktop pixels" not in first


@pytest.mark.parametrize(
    ("name", "size", "fmt"),
    [
        ("ours", (1344, 736), "WEBP"),  # 1366x768 rounded to the grid, then under 1,048,576 px
        ("second", (1024, 896), "PNG"),  # Harbor's default desktop; PNG bytes relabelled from image/webp
    ],
)
def test_screenshots_are_on_the_32_pixel_grid(
    episodes: dict[str, Any], name: str, size: tuple[int, int], fmt: str
) -> None:
    urls = [url for r in episodes[name].requests for url in r.image_urls()]
    assert urls
    for url in urls:
        header, _, payload = url.partition(",")
        with Image.open(io.BytesIO(base64.b64decode(payload))) as image:
            assert (image.size, image.format) == (size, fmt)
        assert header == f"data:image/{fmt.lower()};base64"


# ---------------------------------------------------------------------------------------------------
# The key stays secret


def test_session_key_never_appears_in_logs_or_files(episodes: dict[str, Any]) -> None:
    key = SESSION_KEY.reveal()
    assert not [line for line in episodes["log_lines"] if key in line]
    written = [p for name in ("ours", "second") for p in episodes[name].logs_dir.rglob("*") if p.is_file()]
    assert any(p.name == "debug.json" for p in written)  # episode logging was on
    leaked = [str(p) for p in written if key.encode() in p.read_bytes()]
    assert leaked == []
