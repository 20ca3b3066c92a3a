"""The computer-1 binding: one session of the gateway -> the ``AgentConfig`` and agent env Harbor's Trial needs.

``bind_computer1`` is pure: it reads nothing but its arguments (the environment comes in as a mapping).
Each rule below fixes a way the default binding broke training (see the source pull request):

1. Endpoint and key. The session URL is computer-1's ``api_base``. The key goes in the agent env as
   ``OPENAI_API_KEY``, because Harbor resolves a connection key from the agent env (then ``os.environ``)
   and a resolved key overrides ``llm_kwargs["api_key"]``; putting it in the agent env also keeps it out
   of ``AgentConfig.kwargs``, which Harbor writes to ``result.json`` verbatim.
2. Temperature. The training temperature goes to the constructor's ``temperature``; left unset, Harbor
   sends 0.7, which the gateway refuses for training.
3. Request args. Everything else the trainer sets (top_p, top_k, max_tokens, stop ids, extra_body, ...)
   goes in ``llm_kwargs``, which LiteLLM sends on every request: agent loop, both compactor summaries and
   the final-answer fallback. ``llm_call_kwargs`` reach the agent loop only, so they carry only the
   agent-turn marker, and never an ``extra_body`` (the agent loop would replace the request args'
   ``extra_body`` with it wholesale).
4. Collisions. A request arg named like a constructor parameter of Harbor's ``LiteLLM`` or of the agent
   (its ``__init__`` or options model) would raise ``TypeError`` at construction or be silently
   overwritten. ``temperature`` must equal the training temperature, ``reasoning_effort`` is routed to the
   agent's ``reasoning_effort``, and every other such name is refused, naming the field. The set is
   derived from the installed signatures (``constructor_fields``), so a Harbor upgrade that adds a
   parameter is covered without editing a list.
5. No ``max_seq_len`` (computer-1 has none and rejects unknown options); ``provider="litellm"``;
   ``enable_images=True`` and ``model_info`` with ``supports_vision`` and the real input limit, because
   ``LiteLLM`` registers ``model_info`` in litellm's process-wide table and without an explicit vision
   flag every agent after the first in a process would be refused as vision-less; the input limit is
   also what compaction measures against.
6. Class. ``AgentConfig(name=None, import_path=QWEN3VL_IMPORT_PATH)``: a registered name would make
   Harbor build its stock ``Computer1`` whatever the import path says.
7. Environment. ``HARBOR_AGENT_MAX_ITERATIONS`` sets ``max_turns``; ``HARBOR_CUA_DESKTOP_WIDTH`` /
   ``_HEIGHT`` set the desktop and the browser window (``harbor_env``). Set variables win over params.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from harbor.agents.computer_1.computer_1 import Computer1
from harbor.llms.lite_llm import LiteLLM
from harbor.models.trial.config import AgentConfig

from cua_stream.binding.harbor_env import parse_harbor_env
from cua_stream.binding.qwen3vl import Qwen3VLComputer1
from cua_stream.config import ConfigError, Secret
from cua_stream.events import CALL_KIND_FIELD, CallKind

QWEN3VL_IMPORT_PATH = "cua_stream.binding.qwen3vl:Qwen3VLComputer1"
API_KEY_ENV = "OPENAI_API_KEY"
"""The variable computer-1 resolves its key from (agent env first, then the process env)."""

ROUTED_REQUEST_ARGS = frozenset({"temperature", "reasoning_effort"})
"""Constructor parameters a request arg may name: sampling settings with the same meaning on the wire."""

HARBOR_REQUEST_FIELDS = frozenset({"model", "messages", "api_key", "stream", "drop_params", "logger_fn"})
"""Request fields Harbor sets on every request itself; a request arg with one of these names would be
overwritten (model, messages, drop_params, logger_fn), overridden by the resolved key (api_key) or break
the loop (computer-1 refuses streamed replies)."""


@cache
def constructor_fields() -> frozenset[str]:
    """Every name the agent or its ``LiteLLM`` takes as a named constructor parameter or option."""
    names = set(Qwen3VLComputer1.options_model.model_fields)
    for init in (LiteLLM.__init__, Computer1.__init__):
        for param in inspect.signature(init).parameters.values():
            if param.name != "self" and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                names.add(param.name)
    return frozenset(names)


@dataclass(frozen=True, kw_only=True)
class ServedModel:
    """The model behind the session gateway, as LiteLLM should see it."""

    name: str
    """Served model name (what the engine reports), without a provider prefix."""
    max_input_tokens: int
    """Longest prompt the engine accepts; compaction keeps the history under it."""
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip():
            raise ConfigError(f"model.name: expected a non-empty served model name, got {self.name!r}")
        for name in ("max_input_tokens", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"model.{name}: expected a positive integer, got {value!r}")

    @property
    def litellm_name(self) -> str:
        # openai/<name> + api_base is the one form Harbor's LiteLLM routes without restrictions.
        return f"openai/{self.name}"

    def model_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "max_input_tokens": self.max_input_tokens,
            "supports_vision": True,
            "litellm_provider": "openai",
            "mode": "chat",
        }
        if self.max_output_tokens is not None:
            info["max_output_tokens"] = self.max_output_tokens
        return info


@dataclass(frozen=True, kw_only=True)
class Computer1Params:
    """One gateway session and how to run computer-1 in it."""

    session_url: str
    """The session's OpenAI-compatible base URL (ending in ``/v1``)."""
    session_key: Secret
    temperature: float
    """The training temperature; every request must carry exactly this value."""
    model: ServedModel
    request_args: Mapping[str, Any] = field(default_factory=dict)
    """The trainer's sampling args for every generation (top_p, max_tokens, stop ids, extra_body, ...)."""
    max_turns: int | None = None
    desktop_width: int | None = None
    desktop_height: int | None = None
    screenshot_max_pixels: int | None = None
    max_parse_errors: int | None = None
    """End the episode after this many consecutive replies that do not parse (None: computer-1's retries
    until ``max_turns``)."""
    agent_timeout_sec: float | None = None
    """Harbor's agent phase is unbounded unless this (or the task) sets a limit."""
    start_url: str | None = None
    """The page computer-1 opens before its first turn (a bundled task's own server)."""
    ready_probe: str | None = None
    """A command the environment runs until it succeeds before the first screenshot (the task's sign
    that ``start_url``'s page is drawn)."""

    def __post_init__(self) -> None:
        if not isinstance(self.session_key, Secret):
            object.__setattr__(self, "session_key", Secret(self.session_key))
        if not self.session_key:
            raise ConfigError("session_key: empty (a keyless gateway still needs a placeholder key)")
        if not self.session_url.startswith(("http://", "https://")):
            raise ConfigError(f"session_url: expected an http(s) URL, got {self.session_url!r}")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, int | float):
            raise ConfigError(f"temperature: expected a number, got {self.temperature!r}")


@dataclass(frozen=True)
class Computer1Binding:
    """What Harbor's Trial needs: the agent config and, kept apart so no repr shows it, the agent env."""

    agent_config: AgentConfig
    """The config without the key; safe to log."""
    agent_env: Mapping[str, Secret]

    def trial_agent_config(self) -> AgentConfig:
        """``agent_config`` with the agent env in it, for ``TrialConfig(agent=...)``.

        The returned object's repr shows the key (``AgentConfig.env`` is a plain dict): hand it straight to
        Harbor and never log it. Harbor's own JSON dump of it masks all but 7 characters of the key.
        """
        env = {name: value.reveal() for name, value in self.agent_env.items()}
        return self.agent_config.model_copy(update={"env": env})


def split_request_args(
    request_args: Mapping[str, Any], temperature: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Request args -> (``llm_kwargs``, constructor kwargs routed out of them). Raises on a collision."""
    collisions = constructor_fields() | HARBOR_REQUEST_FIELDS | {CALL_KIND_FIELD}
    llm_kwargs: dict[str, Any] = {}
    routed: dict[str, Any] = {}
    for name, value in request_args.items():
        if name == "temperature":
            if value != temperature:
                raise ConfigError(
                    f"request_args.temperature: {value!r} differs from the training temperature {temperature!r}"
                )
        elif name == "reasoning_effort":
            routed["reasoning_effort"] = value
        elif name in collisions:
            raise ConfigError(_refusal(f"request_args.{name}", name))
        else:
            llm_kwargs[name] = value
    extra_body = llm_kwargs.get("extra_body")
    if extra_body is not None:
        if not isinstance(extra_body, Mapping):
            raise ConfigError(f"request_args.extra_body: expected a mapping, got {type(extra_body).__name__}")
        for name in extra_body:
            # extra_body fields land top-level in the JSON body and override the routed values there.
            if name in collisions or name in ROUTED_REQUEST_ARGS:
                raise ConfigError(_refusal(f"request_args.extra_body.{name}", name))
        llm_kwargs["extra_body"] = dict(extra_body)
    return llm_kwargs, routed


def _refusal(where: str, name: str) -> str:
    if name == CALL_KIND_FIELD:
        return f"{where}: reserved for the agent's call-kind marker"
    if name in ROUTED_REQUEST_ARGS:
        return f"{where}: set it at the top level of the request args, where it is routed to the agent"
    if name in HARBOR_REQUEST_FIELDS:
        return f"{where}: Harbor sets this field on every request itself"
    return f"{where}: names a constructor parameter of computer-1 or its LiteLLM; the binding cannot pass it"


def bind_computer1(params: Computer1Params, env: Mapping[str, str]) -> Computer1Binding:
    """The Harbor agent config for one gateway session (pure: reads only its arguments)."""
    llm_kwargs, routed = split_request_args(params.request_args, params.temperature)
    model_name = params.model.litellm_name
    if Computer1._resolve_litellm_temperature(model_name, params.temperature) is None:
        raise ConfigError(
            f"model.name: Harbor drops the temperature for {model_name!r} (it looks like a reasoning model's "
            "name), so the gateway would never see the training temperature; serve it under another name"
        )
    from_env = parse_harbor_env(env)
    max_turns = from_env.max_turns if from_env.max_turns is not None else params.max_turns
    width = from_env.desktop_width if from_env.desktop_width is not None else params.desktop_width
    height = from_env.desktop_height if from_env.desktop_height is not None else params.desktop_height

    kwargs: dict[str, Any] = {
        "api_base": params.session_url,
        "provider": "litellm",
        "enable_images": True,
        "model_info": params.model.model_info(),
        "temperature": float(params.temperature),
        "llm_kwargs": llm_kwargs,
        "llm_call_kwargs": {CALL_KIND_FIELD: CallKind.AGENT_TURN.value},
        **routed,
    }
    if max_turns is not None:
        kwargs["max_turns"] = max_turns
    if width is not None:
        kwargs["desktop_width"] = kwargs["window_width"] = width
    if height is not None:
        kwargs["desktop_height"] = kwargs["window_height"] = height
    if params.screenshot_max_pixels is not None:
        kwargs["screenshot_max_pixels"] = params.screenshot_max_pixels
    if params.max_parse_errors is not None:
        kwargs["max_parse_errors"] = params.max_parse_errors
    if params.start_url is not None:
        kwargs["start_url"] = params.start_url
    if params.ready_probe is not None:
        kwargs["ready_probe"] = params.ready_probe
    config = AgentConfig(
        name=None,
        import_path=QWEN3VL_IMPORT_PATH,
        model_name=model_name,
        override_timeout_sec=params.agent_timeout_sec,
        kwargs=kwargs,
    )
    return Computer1Binding(agent_config=config, agent_env={API_KEY_ENV: params.session_key})
