"""The binding's output, field by field (no agent is built here; see tests/contract for that)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from harbor.llms.lite_llm import LiteLLM
from harbor.utils.import_path import import_class

from cua_stream.binding.computer1 import (
    API_KEY_ENV,
    HARBOR_REQUEST_FIELDS,
    QWEN3VL_IMPORT_PATH,
    ROUTED_REQUEST_ARGS,
    Computer1Params,
    ServedModel,
    bind_computer1,
    constructor_fields,
)
from cua_stream.binding.qwen3vl import Qwen3VLComputer1
from cua_stream.config import ConfigError, Secret
from cua_stream.events import CALL_KIND_FIELD

pytestmark = pytest.mark.harbor

KEY = "sk-unit-0123456789abcdef"
URL = "http://gateway.local:8000/sessions/s1/v1"
MODEL = ServedModel(name="Qwen3-VL-4B-Instruct", max_input_tokens=30_000, max_output_tokens=2048)


def params(**overrides: Any) -> Computer1Params:
    base: dict[str, Any] = {
        "session_url": URL,
        "session_key": Secret(KEY),
        "temperature": 1.0,
        "model": MODEL,
        "request_args": {"temperature": 1.0, "top_p": 0.9, "max_tokens": 2048, "reasoning_effort": "low"},
    }
    return Computer1Params(**{**base, **overrides})


def test_agent_config_is_assembled_exactly() -> None:
    env = {
        "HARBOR_AGENT_MAX_ITERATIONS": "7",
        "HARBOR_CUA_DESKTOP_WIDTH": "1280",
        "HARBOR_CUA_DESKTOP_HEIGHT": "800",
    }
    config = bind_computer1(params(agent_timeout_sec=900.0), env).agent_config
    assert (config.name, config.import_path, config.model_name) == (
        None,
        QWEN3VL_IMPORT_PATH,
        "openai/Qwen3-VL-4B-Instruct",
    )
    assert config.override_timeout_sec == 900.0
    assert config.kwargs == {
        "api_base": URL,
        "provider": "litellm",
        "enable_images": True,
        "model_info": {
            "max_input_tokens": 30_000,
            "max_output_tokens": 2048,
            "supports_vision": True,
            "litellm_provider": "openai",
            "mode": "chat",
        },
        "temperature": 1.0,
        "reasoning_effort": "low",
        "llm_kwargs": {"top_p": 0.9, "max_tokens": 2048},
        "llm_call_kwargs": {CALL_KIND_FIELD: "agent_turn"},
        "max_turns": 7,
        "desktop_width": 1280,
        "window_width": 1280,
        "desktop_height": 800,
        "window_height": 800,
    }


def test_import_path_names_the_subclass() -> None:
    assert import_class(QWEN3VL_IMPORT_PATH, label="agent") is Qwen3VLComputer1


def test_call_kwargs_hold_the_marker_and_no_extra_body() -> None:
    request_args = {"top_k": 20, "extra_body": {"skip_special_tokens": False}}
    kwargs = bind_computer1(params(request_args=request_args), {}).agent_config.kwargs
    assert kwargs["llm_call_kwargs"] == {CALL_KIND_FIELD: "agent_turn"}
    assert kwargs["llm_kwargs"] == request_args
    assert "reasoning_effort" not in kwargs


def test_params_apply_when_the_env_is_silent_and_env_wins_otherwise() -> None:
    p = params(max_turns=5, desktop_width=1024, desktop_height=768, screenshot_max_pixels=500_000)
    kwargs = bind_computer1(p, {}).agent_config.kwargs
    assert (kwargs["max_turns"], kwargs["desktop_width"], kwargs["window_height"]) == (5, 1024, 768)
    assert kwargs["screenshot_max_pixels"] == 500_000
    kwargs = bind_computer1(p, {"HARBOR_AGENT_MAX_ITERATIONS": "9"}).agent_config.kwargs
    assert (kwargs["max_turns"], kwargs["desktop_width"]) == (9, 1024)


def test_no_desktop_or_turn_settings_leaves_harbor_defaults() -> None:
    kwargs = bind_computer1(params(), {}).agent_config.kwargs
    assert not {"max_turns", "desktop_width", "desktop_height", "window_width", "window_height"} & set(kwargs)


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="HARBOR_CUA_DESKTOP_HEIGHT"):
        bind_computer1(params(), {"HARBOR_CUA_DESKTOP_HEIGHT": "tall"})


# ---------------------------------------------------------------------------------------------------
# Request args that name constructor parameters


def test_request_temperature_must_be_the_training_one() -> None:
    assert "temperature" not in bind_computer1(params(), {}).agent_config.kwargs["llm_kwargs"]
    with pytest.raises(ConfigError, match=r"request_args\.temperature: 0\.7 differs"):
        bind_computer1(params(request_args={"temperature": 0.7}), {})


# Pinned by hand (not read from the implementation's sets, which a shrunk set would pass): every named
# parameter and option of Harbor 0.26.0's computer-1 and LiteLLM, and our two options (the screenshot
# budget, the parse-error limit, the ready probe, its timeout and re-navigation), less the two routed to the constructor (temperature, reasoning_effort).
REFUSED_CONSTRUCTOR_FIELDS = frozenset(
    {
        "api_base", "aws_region_name", "base_url", "collect_rollout_details", "desktop_height",
        "desktop_width", "disable_web_search", "enable_episode_logging", "enable_images", "env_io_dir",
        "extra_env", "extra_tools", "gemini_auto_ack_safety", "llm_call_kwargs", "llm_kwargs", "logger",
        "logs_dir", "max_parse_errors", "max_thinking_tokens", "max_turns", "mcp_servers", "model_api_format",
        "model_api_key_name", "model_info", "model_name", "provider", "runtime_action_timeout_sec",
        "ready_probe", "ready_renavigate_sec", "ready_timeout_sec", "runtime_readiness_timeout_sec", "runtime_request_timeout_sec",
        "screenshot_max_pixels",
        "session_id", "skills_dir", "skip_model_parsing", "start_url", "use_responses_api",
        "window_height", "window_width", "window_x", "window_y",
    }
)  # fmt: skip
# Fields Harbor sets on every request itself (api_key among them: a request arg of that name would land
# in the agent config, and from there in Harbor's result.json), and our call-kind marker.
REFUSED_REQUEST_FIELDS = frozenset(
    {"model", "messages", "api_key", "stream", "drop_params", "logger_fn", "cua_call_kind"}
)


def test_the_refused_sets_are_exactly_the_pinned_ones() -> None:
    assert constructor_fields() - ROUTED_REQUEST_ARGS == REFUSED_CONSTRUCTOR_FIELDS
    assert {"temperature", "reasoning_effort"} == ROUTED_REQUEST_ARGS
    assert HARBOR_REQUEST_FIELDS | {CALL_KIND_FIELD} == REFUSED_REQUEST_FIELDS


@pytest.mark.parametrize("name", sorted(REFUSED_CONSTRUCTOR_FIELDS))
def test_constructor_field_in_request_args_is_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"request_args\.{name}:"):
        bind_computer1(params(request_args={name: 1}), {})


@pytest.mark.parametrize("name", sorted(REFUSED_REQUEST_FIELDS))
def test_request_field_harbor_sets_itself_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"request_args\.{name}:"):
        bind_computer1(params(request_args={name: "x"}), {})


@pytest.mark.parametrize("name", ["temperature", "reasoning_effort", "session_id", CALL_KIND_FIELD, "model"])
def test_collision_inside_extra_body_is_refused(name: str) -> None:
    # extra_body's fields land top-level in the JSON body, where they would override the routed values.
    with pytest.raises(ConfigError, match=rf"request_args\.extra_body\.{name}:"):
        bind_computer1(params(request_args={"extra_body": {name: "x"}}), {})


def test_extra_body_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"request_args\.extra_body"):
        bind_computer1(params(request_args={"extra_body": ["top_k"]}), {})


LITELLM_PARAMS = {
    "model_name",
    "temperature",
    "api_base",
    "session_id",
    "collect_rollout_details",
    "max_thinking_tokens",
    "reasoning_effort",
    "model_info",
    "use_responses_api",
    "model_api_format",
    "skip_model_parsing",
}


def test_collision_set_follows_the_installed_signatures() -> None:
    # Pinned: a Harbor upgrade that changes LiteLLM's named parameters fails here for a human to review.
    named = {
        p.name
        for p in inspect.signature(LiteLLM.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    assert named == LITELLM_PARAMS
    fields = constructor_fields()
    assert fields >= LITELLM_PARAMS
    # Computer1's own parameters and options, ours included.
    assert fields >= {"max_turns", "llm_kwargs", "llm_call_kwargs", "provider", "enable_images", "base_url"}
    assert "screenshot_max_pixels" in fields
    # Sampling args the trainer really sends stay out of it.
    assert not fields & {"top_p", "top_k", "max_tokens", "stop", "stop_token_ids", "extra_body", "seed"}


# ---------------------------------------------------------------------------------------------------
# The key


def test_key_lives_in_the_agent_env_only() -> None:
    binding = bind_computer1(params(), {})
    assert binding.agent_env == {API_KEY_ENV: KEY}
    assert binding.agent_config.env == {}
    for text in (
        repr(binding),
        str(binding),
        binding.agent_config.model_dump_json(),
        repr(binding.agent_config),
    ):
        assert KEY not in text
    trial_config = binding.trial_agent_config()
    assert trial_config.env == {API_KEY_ENV: KEY}
    assert KEY not in trial_config.model_dump_json()  # Harbor masks it when it writes result.json
    assert binding.agent_config.env == {}  # the copy did not touch the original


def test_plain_string_key_becomes_a_secret() -> None:
    p = params(session_key=KEY)
    assert isinstance(p.session_key, Secret)
    assert KEY not in repr(p)


# ---------------------------------------------------------------------------------------------------
# Parameter validation


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"session_key": Secret("")}, "session_key"),
        ({"session_url": "gateway:8000/v1"}, "session_url"),
        ({"temperature": "1.0"}, "temperature"),
        ({"temperature": True}, "temperature"),
    ],
)
def test_bad_params_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        params(**overrides)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "", "max_input_tokens": 1}, "model.name"),
        ({"name": " q", "max_input_tokens": 1}, "model.name"),
        ({"name": "q", "max_input_tokens": 0}, "model.max_input_tokens"),
        ({"name": "q", "max_input_tokens": 10, "max_output_tokens": -1}, "model.max_output_tokens"),
    ],
)
def test_bad_served_model_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ServedModel(**kwargs)


def test_served_name_that_makes_harbor_drop_the_temperature_is_refused() -> None:
    with pytest.raises(ConfigError, match="drops the temperature"):
        bind_computer1(params(model=ServedModel(name="gpt-5-mini", max_input_tokens=1000)), {})
