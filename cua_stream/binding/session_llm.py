"""``SessionLLM``: the agent's Harbor ``LiteLLM`` as ``Qwen3VLComputer1`` uses it.

It changes two things about the requests Harbor builds, and nothing else (context limit, model name,
temperature, usage extraction are the wrapped instance's, read through ``__getattr__``):

- Marker: every request built while a ``markers.marking`` scope is open carries the active
  ``cua_call_kind``. Harbor 0.26.0 builds a request body in two places, and both are hooked:
  ``LiteLLM.call`` (compactor summaries, text-only fallback) applies per-call kwargs last, and
  ``Computer1Chat.chat`` (agent loop, multimodal fallback) starts from ``LiteLLM._build_base_kwargs``.
- Secret: the per-turn ``debug.json`` Harbor writes through litellm's ``logger_fn`` drops the top-level
  ``api_key`` but keeps ``litellm_params.api_key``, i.e. the session key in clear on disk. The logger
  function handed to litellm here drops every credential-named field at any depth first. (Only the agent
  loop passes a logging path, and it builds its request through ``_build_base_kwargs``.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harbor.llms.base import LLMResponse
from harbor.llms.lite_llm import LiteLLM

from cua_stream.binding.markers import active_marker

CREDENTIAL_FIELDS = frozenset({"api_key", "authorization", "x-api-key"})


def without_credentials(value: Any) -> Any:
    """A copy of ``value`` with every dict entry named like a credential removed, at any depth."""
    if isinstance(value, dict):
        return {
            k: without_credentials(v) for k, v in value.items() if str(k).lower() not in CREDENTIAL_FIELDS
        }
    if isinstance(value, list | tuple):
        return [without_credentials(v) for v in value]
    return value


def _scrubbing(logger_fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def scrubbed(model_call_dict: dict[str, Any]) -> None:
        logger_fn(without_credentials(model_call_dict))

    return scrubbed


class SessionLLM:
    """The agent's ``LiteLLM`` with marked requests and credential-free debug logs."""

    def __init__(self, llm: LiteLLM) -> None:
        self._inner = llm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _build_base_kwargs(self, logging_path: Path | None = None) -> dict[str, Any]:
        kwargs = self._inner._build_base_kwargs(logging_path)
        if kwargs.get("logger_fn") is not None:
            kwargs["logger_fn"] = _scrubbing(kwargs["logger_fn"])
        return {**kwargs, **active_marker()}

    async def call(self, prompt: str, *args: Any, **kwargs: Any) -> LLMResponse:
        # LiteLLM.call builds its base kwargs from the wrapped instance, then applies **kwargs last.
        return await self._inner.call(prompt, *args, **{**kwargs, **active_marker()})
