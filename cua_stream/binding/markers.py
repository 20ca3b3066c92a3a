"""Call-kind markers on the requests computer-1 makes outside its agent loop.

The session gateway must tell an agent turn from a compaction summary, a short summary and the
final-answer fallback (they train differently), and the only thing it sees is the request. Each request
therefore carries a top-level ``cua_call_kind`` field (``cua_stream.events.CALL_KIND_FIELD``):

- agent-loop requests get it from ``llm_call_kwargs``, which Harbor applies to the agent loop only (the
  binding sets it there);
- the other three call sites pass no per-call kwargs at all, so ``Qwen3VLComputer1`` marks them: the
  call site runs inside ``marking(kind)`` (``MarkingCompactor`` for the summaries, the agent for the
  fallback), and ``session_llm.SessionLLM``, which stands in for the agent's ``LiteLLM``, adds the active
  kind to every request built while that scope is open.

Outside a ``marking`` scope nothing is added, so the agent loop's marker comes from ``llm_call_kwargs``
alone. The marker is a plain top-level kwarg, never ``extra_body``: the agent loop replaces
``extra_body`` wholesale, and the request args' own ``extra_body`` must reach every call intact.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from harbor.agents.computer_1.compaction import Computer1Compactor

from cua_stream.events import CALL_KIND_FIELD, CallKind

# A ContextVar rather than an attribute: concurrent episodes in one process each run in their own task,
# and a task sees only the scopes it opened itself.
_active_kind: ContextVar[CallKind | None] = ContextVar("cua_active_call_kind", default=None)


@contextmanager
def marking(kind: CallKind) -> Iterator[None]:
    """Mark every request built inside this scope (in this task) as ``kind``."""
    token = _active_kind.set(kind)
    try:
        yield
    finally:
        _active_kind.reset(token)


def active_marker() -> dict[str, str]:
    """The request field for the open ``marking`` scope; empty outside any scope."""
    kind = _active_kind.get()
    return {} if kind is None else {CALL_KIND_FIELD: kind.value}


class MarkingCompactor(Computer1Compactor):
    """Harbor's compactor with its two summary requests marked."""

    async def _build_summary_from_history(self, *args: Any, **kwargs: Any) -> str | None:
        with marking(CallKind.COMPACTION_SUMMARY):
            return await super()._build_summary_from_history(*args, **kwargs)

    async def _build_short_summary(self, *args: Any, **kwargs: Any) -> str | None:
        with marking(CallKind.COMPACTION_SHORT_SUMMARY):
            return await super()._build_short_summary(*args, **kwargs)
