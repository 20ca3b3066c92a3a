"""The gateway's retract-mode continuation, pure parts and its loop over a scripted engine (unit test:
the real engine and gateway run it in tests/integration/test_weight_update_modes.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cua_stream.events import VersionSpan
from cua_stream.gateway.engine_client import EngineReply, JsonIds
from cua_stream.gateway.retract import (
    MAX_CONTINUATIONS,
    RetractWindow,
    continuation,
    generate_continuing,
    joined,
)

pytestmark = pytest.mark.anyio


def reply(ids: list[int], finish: str, *spans: tuple[int, int, int], text: str = "") -> EngineReply:
    return EngineReply(
        text=text or "".join(chr(97 + i % 26) for i in ids),
        output_ids=ids,
        logprobs=[-i / 10 for i in ids],
        finish_reason=finish,
        abort_status=503 if finish == "abort" else None,
        abort_message="aborted" if finish == "abort" else "",
        weight_versions=tuple(VersionSpan(version=v, start=s, end=e) for v, s, e in spans),
        prompt_tokens=3,
        engine_ms=5.0,
        meta_info={},
    )


def test_the_continuation_is_the_prompt_with_the_tokens_so_far_and_the_rest_of_the_budget() -> None:
    prompt = JsonIds.of([1, 2, 3])
    ids, sampling = continuation(prompt, {"max_new_tokens": 10, "temperature": 1.0}, reply([7, 8], "abort"))
    assert ids.decode() == [1, 2, 3, 7, 8]
    assert sampling == {"max_new_tokens": 8, "temperature": 1.0}
    assert continuation(prompt, {"max_new_tokens": 2}, reply([7, 8], "abort")) is None


def test_two_parts_join_into_one_reply_with_shifted_spans() -> None:
    first = reply([1, 2, 3], "abort", (4, 0, 3))
    rest = reply([5, 6], "length", (5, 0, 2))
    one = joined(first, rest)
    assert one.output_ids == [1, 2, 3, 5, 6] and one.logprobs == first.logprobs + rest.logprobs
    assert one.weight_versions == (
        VersionSpan(version=4, start=0, end=3),
        VersionSpan(version=5, start=3, end=5),
    )
    assert (one.finish_reason, one.abort_status, one.text) == ("length", None, first.text + rest.text)
    assert (one.prompt_tokens, one.engine_ms, one.meta_info["retractions"]) == (3, 10.0, 1)
    same = joined(first, reply([5], "stop", (4, 0, 1)))  # continued on the same weights: one span
    assert same.weight_versions == (VersionSpan(version=4, start=0, end=4),)
    empty = joined(reply([], "abort", (4, 0, 0)), rest)  # aborted before its first token
    assert empty.weight_versions == (VersionSpan(version=5, start=0, end=2),)


class Script:
    """A /generate that answers from a list, noting what it was asked."""

    def __init__(self, *replies: EngineReply) -> None:
        self.replies = list(replies)
        self.asked: list[tuple[list[int], int, str]] = []

    async def __call__(self, ids: JsonIds, sampling: dict[str, Any], rid: str) -> EngineReply:
        self.asked.append((ids.decode(), sampling["max_new_tokens"], rid))
        return self.replies.pop(0)


async def test_an_abort_during_a_retract_window_is_continued_into_one_reply() -> None:
    window = RetractWindow()
    window.begin()
    engine = Script(reply([7, 8], "abort", (0, 0, 2)), reply([9], "length", (1, 0, 1)))
    one = await generate_continuing(engine, JsonIds.of([1, 2]), {"max_new_tokens": 3}, "c1", window)
    assert engine.asked == [([1, 2], 3, "c1"), ([1, 2, 7, 8], 1, "c1.r1")]
    assert one.output_ids == [7, 8, 9] and one.finish_reason == "length"
    assert [s.version for s in one.weight_versions] == [0, 1]


async def test_an_abort_after_the_window_closed_still_counts_if_the_window_opened_during_the_call() -> None:
    window = RetractWindow()

    class OpensAndCloses(Script):
        async def __call__(self, ids: JsonIds, sampling: dict[str, Any], rid: str) -> EngineReply:
            if not self.asked:  # the update runs while the first part is generated
                window.begin()
                window.end()
            return await super().__call__(ids, sampling, rid)

    engine = OpensAndCloses(reply([7], "abort", (0, 0, 1)), reply([9], "stop", (1, 0, 1)))
    one = await generate_continuing(engine, JsonIds.of([1]), {"max_new_tokens": 5}, "c", window)
    assert one.output_ids == [7, 9] and one.finish_reason == "stop"


async def test_an_abort_with_no_retraction_is_passed_on_and_continuations_are_bounded() -> None:
    aborted = reply([7], "abort", (0, 0, 1))
    engine = Script(aborted)
    assert (
        await generate_continuing(engine, JsonIds.of([1]), {"max_new_tokens": 5}, "c", RetractWindow())
        is aborted
    )
    window = RetractWindow()
    window.begin()
    engine = Script(*[reply([7], "abort", (0, 0, 1)) for _ in range(MAX_CONTINUATIONS + 1)])
    one = await generate_continuing(engine, JsonIds.of([1]), {"max_new_tokens": 100}, "c", window)
    assert one.finish_reason == "abort" and len(engine.asked) == MAX_CONTINUATIONS + 1
    spent = await generate_continuing(
        Script(reply([7, 8], "abort", (0, 0, 2))), JsonIds.of([1]), {"max_new_tokens": 2}, "c", window
    )
    assert spent.finish_reason == "length" and spent.output_ids == [7, 8]  # nothing left to continue
