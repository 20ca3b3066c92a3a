"""Weight updates in ``retract`` mode: calls the engine aborted for the update are continued, not refused.

The trainer opens a retract window on the gateway (``POST /admin/pause_generation {"mode": "retract"}``),
pauses the engine with SGLang's ``abort`` mode (every generation in flight ends at its next step,
returning the tokens it has), loads the new weights, continues the engine and closes the window
(``/admin/continue_generation``). A call whose generation came back aborted while a window was open,
or after one opened during it, is sent again as its prompt plus the tokens it already has (a forced
prefix) with the rest of its token budget, and the two replies become one: one call record whose
per-token versions say which weights sampled which tokens, and one reply to the agent. The engine holds
the continuation while it is paused, so it runs under the new weights.

``continuation`` and ``joined`` are pure; ``generate_continuing`` is the I/O around them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from cua_stream.events import VersionSpan
from cua_stream.gateway.engine_client import EngineReply, JsonIds

MAX_CONTINUATIONS = 8
"""A call is continued at most this often (one per weight update it spans); an abort after that is
refused as any engine abort is (503), so a stuck update loop cannot hold a call forever."""


class RetractWindow:
    """Whether an aborted generation was aborted for a retract-mode weight update.

    ``epoch`` counts the windows opened; a call notes it when it starts. Its abort was a retraction if
    a window is open now, or one opened since the call started (the abort can arrive after the window
    closed: the engine answers the aborted request while the trainer finishes the update)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.open = 0

    def begin(self) -> None:
        self.epoch += 1
        self.open += 1

    def end(self) -> None:
        self.open = max(0, self.open - 1)

    def covers(self, since_epoch: int) -> bool:
        return self.open > 0 or self.epoch != since_epoch


def continuation(
    prompt: JsonIds, sampling: dict[str, Any], done: EngineReply
) -> tuple[JsonIds, dict[str, Any]] | None:
    """The request that continues an aborted generation: the prompt with the tokens ``done`` has as a
    forced prefix, and the rest of the token budget. None when no budget is left."""
    budget = int(sampling["max_new_tokens"]) - len(done.output_ids)
    if budget < 1:
        return None
    return JsonIds.of(done.output_ids, prompt), {**sampling, "max_new_tokens": budget}


def joined(first: EngineReply, rest: EngineReply) -> EngineReply:
    """One reply of ``first`` (aborted) followed by ``rest`` (its continuation): ids, logprobs and
    version spans concatenated (``rest``'s shifted past ``first``'s tokens; adjacent spans of one
    version merged), ``rest``'s finish. The text is the two texts concatenated: the engine decoded each
    part on its own, so a character whose bytes straddle the cut reads as two replacement characters
    (the ids, which training reads, are exact)."""
    n = len(first.output_ids)
    spans = [s for s in first.weight_versions if s.end > s.start]
    for span in rest.weight_versions:
        shifted = VersionSpan(version=span.version, start=span.start + n, end=span.end + n)
        if spans and spans[-1].version == shifted.version and spans[-1].end == shifted.start:
            spans[-1] = VersionSpan(version=shifted.version, start=spans[-1].start, end=shifted.end)
        elif shifted.end > shifted.start:
            spans.append(shifted)
    return replace(
        rest,
        text=first.text + rest.text,
        output_ids=first.output_ids + rest.output_ids,
        logprobs=first.logprobs + rest.logprobs,
        weight_versions=tuple(spans),
        prompt_tokens=first.prompt_tokens,
        engine_ms=first.engine_ms + rest.engine_ms,
        meta_info={**rest.meta_info, "retractions": int(first.meta_info.get("retractions", 0)) + 1},
    )


def budget_spent(done: EngineReply) -> EngineReply:
    """An aborted reply that had already used its whole budget: what the engine would have said."""
    return replace(done, finish_reason="length", abort_status=None, abort_message="")


Generate = Callable[[JsonIds, dict[str, Any], str], Awaitable[EngineReply]]
"""One /generate: (prompt ids, sampling params, rid) → reply."""


async def generate_continuing(
    generate: Generate,
    prompt: JsonIds,
    sampling: dict[str, Any],
    rid: str,
    window: RetractWindow | None,
) -> EngineReply:
    """``generate``, and each abort a retract window explains continued as described above (the
    continuation's rid is ``<rid>.r<n>``: the engine's logs name each part)."""
    since = window.epoch if window is not None else 0
    reply = await generate(prompt, sampling, rid)
    for n in range(1, MAX_CONTINUATIONS + 1):
        if reply.finish_reason != "abort" or window is None or not window.covers(since):
            return reply
        since = window.epoch
        request = continuation(prompt, sampling, reply)
        if request is None:
            return budget_spent(reply)
        rest = await generate(*request, f"{rid}.r{n}")
        reply = joined(reply, rest)
    return reply
