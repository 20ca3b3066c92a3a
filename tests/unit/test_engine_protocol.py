"""SGLang /generate replies as the gateway reads them, and the reference engine's sampling and gate."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch

from cua_stream.engine.params import SamplingError, SamplingParams
from cua_stream.engine.runner import EngineInputError, Gate, decode_image_data
from cua_stream.engine.sampling import draw
from cua_stream.events import VersionSpan
from cua_stream.gateway.engine_client import EngineProtocolError, parse_generate_response


def sglang_reply(**meta: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "r1",
        "finish_reason": {"type": "stop", "matched": 151645},
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "weight_version": "7",
        "output_token_logprobs": [[-0.1, 11, None], [-0.2, 12, None], [-0.3, 151645, None]],
    }
    base.update(meta)
    return {"text": "ab", "output_ids": [11, 12, 151645], "meta_info": base}


def test_a_plain_reply_is_one_span_of_its_weight_version() -> None:
    reply = parse_generate_response(sglang_reply())
    assert reply.output_ids == [11, 12, 151645] and reply.logprobs == [-0.1, -0.2, -0.3]
    assert reply.finish_reason == "stop"
    assert reply.weight_versions == (VersionSpan(version=7, start=0, end=3),)


def test_per_token_spans_are_read_and_default_is_version_zero() -> None:
    spans = [{"version": "4", "start": 0, "end": 2}, {"version": "5", "start": 2, "end": 3}]
    reply = parse_generate_response(sglang_reply(weight_versions=spans, weight_version="5"))
    assert [(s.version, s.start, s.end) for s in reply.weight_versions] == [(4, 0, 2), (5, 2, 3)]
    assert parse_generate_response(sglang_reply(weight_version="default")).weight_versions[0].version == 0


def test_length_and_abort_finishes() -> None:
    reply = parse_generate_response(sglang_reply(finish_reason={"type": "length", "length": 3}))
    assert reply.finish_reason == "length"
    abort = {"type": "abort", "message": "paused", "status_code": 503, "err_type": "x"}
    reply = parse_generate_response(sglang_reply(finish_reason=abort))
    assert reply.finish_reason == "abort" and reply.abort_status == 503 and reply.abort_message == "paused"


@pytest.mark.parametrize(
    "meta",
    [
        {"output_token_logprobs": None},
        {"output_token_logprobs": [[-0.1, 11, None], [-0.2, 12, None]]},
        {"output_token_logprobs": [[-0.1, 11, None], [-0.2, 99, None], [-0.3, 151645, None]]},
        {"output_token_logprobs": [[None, 11, None], [-0.2, 12, None], [-0.3, 151645, None]]},
        {"finish_reason": {"type": "eos"}},
        {"weight_version": "policy-a"},
        {"weight_versions": [{"version": "1", "start": 0, "end": 2}]},
        {"weight_versions": [{"version": "1", "start": 1, "end": 3}]},
        {"weight_versions": [{"version": "1", "start": 0, "end": None}]},
    ],
)
def test_inconsistent_replies_are_protocol_errors(meta: dict[str, Any]) -> None:
    with pytest.raises(EngineProtocolError):
        parse_generate_response(sglang_reply(**meta))


def test_sampling_params_parse_and_refuse_what_the_engine_cannot_honour() -> None:
    p = SamplingParams.from_request(
        {
            "temperature": 0.7,
            "top_k": 20,
            "max_new_tokens": 8,
            "stop": "END",
            "spaces_between_special_tokens": False,
        }
    )
    assert (p.temperature, p.top_k, p.max_new_tokens, p.stop) == (0.7, 20, 8, ("END",))
    assert SamplingParams.from_request({"frequency_penalty": 0.0, "n": 1}).temperature == 1.0
    for bad in (
        {"frequency_penalty": 0.5},
        {"n": 2},
        {"regex": "a+"},
        {"beam_width": 2},
        {"top_p": 0},
        {"top_k": 0},
    ):
        with pytest.raises(SamplingError):
            SamplingParams.from_request(bad)


def test_draw_reports_the_temperature_scaled_unfiltered_logprob() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    generator = torch.Generator().manual_seed(0)
    token, logprob = draw(logits, SamplingParams(temperature=0.5, top_k=1), generator)
    assert token == 0
    assert logprob == pytest.approx(float(torch.log_softmax(logits / 0.5, -1)[0]))
    # top-k truncation decides what can be drawn, not the reported logprob
    seen = set()
    for _ in range(50):
        token, logprob = draw(logits, SamplingParams(temperature=1.0, top_k=2), generator)
        seen.add(token)
        assert logprob == pytest.approx(float(torch.log_softmax(logits, -1)[token]))
    assert seen == {0, 1}
    # the same seed draws the same tokens
    a = [draw(logits, SamplingParams(), torch.Generator().manual_seed(9))[0] for _ in range(5)]
    b = [draw(logits, SamplingParams(), torch.Generator().manual_seed(9))[0] for _ in range(5)]
    assert a == b


def test_gate_freezes_in_place_and_aborts() -> None:
    gate = Gate()
    assert gate.may_continue(gate.epoch)
    gate.pause("in_place")
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(gate.may_continue(gate.epoch)))
    waiter.start()
    time.sleep(0.1)
    assert results == []  # frozen while paused
    gate.resume()
    waiter.join(30)  # a hang guard: it wakes within its 50 ms poll of the gate
    assert results == [True]
    epoch = gate.epoch
    gate.pause("abort")
    assert gate.may_continue(epoch) is False
    with pytest.raises(EngineInputError):
        gate.pause("sideways")


def test_image_data_forms() -> None:
    assert decode_image_data("data:image/png;base64,aGk=") == b"hi"
    assert decode_image_data("aGk=") == b"hi"
    with pytest.raises(EngineInputError):
        decode_image_data("not base64 !!")


def test_a_record_takes_the_oldest_version_among_its_tokens() -> None:
    from cua_stream.events import CallKind, SummaryEvent, TokenIds, TurnEvent
    from cua_stream.gateway.records import build_record, topic_for
    from cua_stream.topics import SUMMARIES, TURNS

    spans = [{"version": "5", "start": 0, "end": 1}, {"version": "4", "start": 1, "end": 3}]
    reply = parse_generate_response(sglang_reply(weight_versions=spans))
    common: dict[str, Any] = {
        "run_id": "r",
        "group_id": "g",
        "episode_id": "e",
        "seq": 0,
        "call_id": "c",
        "parent_call_id": None,
        "delta_ids": TokenIds([1, 2]),
        "images": (),
        "reply": reply,
        "sampling": {"temperature": 1.0},
        "started_at": 0.0,
        "gateway_ms": 0.1,
    }
    turn = build_record(kind=CallKind.FINAL_ANSWER, **common)
    assert isinstance(turn, TurnEvent) and turn.policy_version == 4
    assert [s.version for s in turn.weight_versions] == [5, 4]
    assert list(turn.completion_logprobs) == [-0.1, -0.2, -0.3]
    summary = build_record(kind=CallKind.COMPACTION_SHORT_SUMMARY, **common)
    assert isinstance(summary, SummaryEvent)
    assert topic_for(CallKind.COMPACTION_SUMMARY) is SUMMARIES and topic_for(CallKind.AGENT_TURN) is TURNS
