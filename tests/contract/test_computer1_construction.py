"""The binding's config against Harbor 0.26.0's real agent factory, Computer1 and LiteLLM constructors.

No request is sent here (see test_computer1_episodes for the wire); these are the failures that happen
before the first one.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from harbor.agents.base import BaseAgent
from harbor.agents.factory import AgentFactory
from harbor.models.trial.config import AgentConfig

from cua_stream.binding.computer1 import Computer1Params, ServedModel, bind_computer1
from cua_stream.binding.markers import MarkingCompactor
from cua_stream.binding.qwen3vl import Qwen3VLComputer1
from cua_stream.binding.session_llm import SessionLLM
from cua_stream.config import ConfigError, Secret

pytestmark = pytest.mark.harbor


def served() -> ServedModel:
    # A fresh name per test: litellm's model table is process-wide.
    return ServedModel(name=f"qwen3-vl-ctor-{uuid.uuid4().hex[:8]}", max_input_tokens=32_768)


def ours(model: ServedModel, request_args: dict[str, Any] | None = None) -> AgentConfig:
    params = Computer1Params(
        session_url="http://127.0.0.1:9/v1",  # never contacted: nothing here sends a request
        session_key=Secret("sk-ctor-key"),
        temperature=1.0,
        model=model,
        request_args=request_args or {"top_p": 0.9, "max_tokens": 256},
    )
    return bind_computer1(params, {}).trial_agent_config()


def build(config: AgentConfig, tmp_path: Path) -> BaseAgent:
    # Harbor's Trial builds its agent exactly like this.
    return AgentFactory.create_agent_from_config(config, logs_dir=tmp_path / uuid.uuid4().hex)


def test_ours_builds_qwen3vl_computer1_with_its_session_llm(tmp_path: Path) -> None:
    agent = build(ours(served()), tmp_path)
    assert type(agent) is Qwen3VLComputer1
    assert isinstance(agent._llm, SessionLLM)
    assert isinstance(agent._compactor, MarkingCompactor) and agent._compactor._llm is agent._llm
    assert agent.options.temperature == 1.0


def test_max_seq_len_is_refused_by_the_real_constructor(tmp_path: Path) -> None:
    config = ours(served())
    assert "max_seq_len" not in config.kwargs
    build(config, tmp_path)
    naive = config.model_copy(update={"kwargs": {**config.kwargs, "max_seq_len": 32_768}})
    with pytest.raises((TypeError, ValueError), match="max_seq_len"):
        build(naive, tmp_path)


def test_vision_left_to_metadata_breaks_the_second_agent_in_a_process(tmp_path: Path) -> None:
    model = served()
    naive = ours(model)
    naive.kwargs.pop("enable_images")
    naive.kwargs["model_info"] = {"max_input_tokens": model.max_input_tokens}
    build(naive, tmp_path)  # the first registers the model in litellm's table, without vision
    with pytest.raises(ValueError, match="does not support vision"):
        build(naive, tmp_path)
    # Ours, for the same served model, after that registration: every agent is built with images on.
    for _ in range(2):
        assert build(ours(model), tmp_path)._enable_images is True


# The LiteLLM parameters Computer1 passes by name, with a value of the right type for each.
NAMED_LITELLM_ARGS: dict[str, Any] = {
    "temperature": 0.7,
    "api_base": "http://elsewhere/v1",
    "reasoning_effort": "low",
    "session_id": "s-1",
    "collect_rollout_details": True,
    "max_thinking_tokens": 2048,
    "model_info": {"max_input_tokens": 1},
    "use_responses_api": False,
    "model_name": "openai/other",
}


@pytest.mark.parametrize("name", sorted(NAMED_LITELLM_ARGS))
def test_request_arg_naming_a_litellm_parameter_never_reaches_llm_kwargs(name: str, tmp_path: Path) -> None:
    value = NAMED_LITELLM_ARGS[name]
    config = ours(served())
    # Naive: pass the request arg through llm_kwargs -> the real constructor fails.
    naive = config.model_copy(update={"kwargs": {**config.kwargs, "llm_kwargs": {name: value}}})
    with pytest.raises(TypeError, match=f"multiple values for keyword argument '{name}'"):
        build(naive, tmp_path)
    # Ours: routed to the constructor parameter (reasoning_effort) or refused, naming the field.
    try:
        routed = ours(served(), {name: value})
    except ConfigError as e:
        assert f"request_args.{name}" in str(e)
    else:
        assert name == "reasoning_effort"
        agent = build(routed, tmp_path)
        assert agent.options.reasoning_effort == value
        assert name not in agent.options.llm_kwargs


def test_reasoning_effort_in_request_args_reaches_the_llm(tmp_path: Path) -> None:
    agent = build(ours(served(), {"reasoning_effort": "high", "top_p": 0.9}), tmp_path)
    assert agent._llm._reasoning_effort == "high"
    assert agent.options.llm_kwargs == {"top_p": 0.9}
