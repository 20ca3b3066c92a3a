"""The event contract: round trips, the union's shape, headers and keys, schema evolution."""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

import cua_stream
from cua_stream import events
from cua_stream.bus.codec import decode_record
from cua_stream.errors import UndecodableRecord
from cua_stream.events import (
    RECORD_TYPES,
    SCHEMA,
    Event,
    Logprobs,
    TokenIds,
    TurnEvent,
    decode,
    encode,
    from_json,
    headers_for,
    to_json,
)
from cua_stream.topics import EVALS
from tests.unit.samples import SAMPLES

GOLDEN = Path(__file__).parent.parent / "golden"
FIRST_WRITTEN = {"eval_report": "v4", "trainer_settings": "v5"}
"""The golden folder of each record type that came after v1 (its first bytes; the later folders' files
are new fields of older types)."""


def golden(name: str) -> Path:
    return GOLDEN / FIRST_WRITTEN.get(name, "v1") / f"{name}.msgpack"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_msgpack_and_json_round_trip(name: str) -> None:
    event = SAMPLES[name]
    assert decode(encode(event)) == event
    assert from_json(to_json(event)) == event


def test_every_record_type_has_a_sample_and_a_golden_file() -> None:
    tags = {events.tag_of(t) for t in RECORD_TYPES}
    assert tags  # the union was walked (an empty one holds every rule)
    assert tags <= {events.tag_of(e) for e in SAMPLES.values()}
    assert tags <= {events.tag_of(events.decode(golden(n).read_bytes())) for n in SAMPLES}


def test_union_is_frozen_kw_only_and_uniquely_tagged() -> None:
    tags = [t.__struct_config__.tag for t in RECORD_TYPES]
    assert tags  # the union was walked (an empty one holds every rule)
    assert len(tags) == len(set(tags)) and all(tags)
    for t in RECORD_TYPES:
        cfg = t.__struct_config__
        params = inspect.signature(t).parameters.values()
        assert cfg.frozen and cfg.tag_field == "type", t
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), t
        assert issubclass(t, Event)


def test_no_other_module_defines_wire_structs() -> None:
    """Principle 1: records (subclasses of events.Event) are defined in cua_stream/events.py only."""
    root = Path(cua_stream.__file__).parent
    modules = [p for p in root.rglob("*.py") if not (p.name == "events.py" and p.parent == root)]
    assert len(modules) > 100  # the package was found (an empty walk holds every rule)
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                assert not bases & {"Event", "EpisodeEvent", "CallRecord", "events.Event"}, (
                    f"{path}:{node.name}"
                )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_golden_bytes_from_their_first_version_still_decode_to_the_same_values(name: str) -> None:
    assert decode(golden(name).read_bytes()) == SAMPLES[name]


def test_an_older_reader_ignores_a_new_optional_field() -> None:
    class TurnEventV2(TurnEvent, frozen=True, kw_only=True, tag="turn"):
        """A future writer that added a field (with a default, per rule 1)."""

        reasoning_ids: tuple[int, ...] = ()

    newer = msgspec.msgpack.Encoder(enc_hook=lambda a: a.tobytes())
    fields = {f: getattr(SAMPLES["turn"], f) for f in TurnEvent.__struct_fields__}
    data = newer.encode(TurnEventV2(**fields, reasoning_ids=(1, 2, 3)))
    assert b"reasoning_ids" in data
    assert decode(data) == SAMPLES["turn"]  # today's reader: the new field is ignored


def test_a_newer_reader_fills_defaults_for_fields_an_older_writer_lacked() -> None:
    full = msgspec.to_builtins(SAMPLES["summary"], enc_hook=lambda a: a.tobytes(), builtin_types=(bytes,))
    old = msgspec.msgpack.encode(
        {k: v for k, v in full.items() if k not in ("engine_ms", "gateway_ms", "images")}
    )
    back = decode(old)
    assert (
        back.engine_ms == 0.0
        and back.images == ()
        and back.completion_ids == SAMPLES["summary"].completion_ids
    )


def test_unknown_tag_and_garbage_fail_to_decode() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(msgspec.msgpack.encode({"type": "nope", "run_id": "r"}))
    with pytest.raises(msgspec.DecodeError):
        decode(b"\xc1")


def test_packed_arrays_keep_values_and_are_compact() -> None:
    ids = TokenIds(range(2000))
    lps = Logprobs([-0.5] * 2000)
    turn = msgspec.structs.replace(SAMPLES["turn"], prompt_ids=ids, completion_logprobs=lps)
    data = encode(turn)
    assert len(data) < 2000 * 4 + 2000 * 8 + 1024
    back = decode(data)
    assert list(back.prompt_ids) == list(range(2000)) and back.completion_logprobs.tolist() == [-0.5] * 2000
    assert isinstance(back.prompt_ids, TokenIds) and isinstance(back.completion_logprobs, Logprobs)
    with pytest.raises(OverflowError):
        TokenIds([2**31])


def test_headers_route_without_decoding() -> None:
    h = dict(headers_for(SAMPLES["turn"]))
    assert h == {
        "schema": SCHEMA.encode(),
        "type": b"turn",
        "run_id": b"run-7",
        "episode_id": b"ep-3-1",
        "policy_version": b"4",
    }
    assert dict(headers_for(SAMPLES["policy_version"]))["policy_version"] == b"5"
    assert "episode_id" not in dict(headers_for(SAMPLES["train_step"]))


def test_keys_come_from_the_topic_spec_and_co_partition_a_group() -> None:
    from cua_stream.bus.codec import key_of
    from cua_stream.topics import BY_NAME

    expected = {
        "work": b"grp-3",
        "eval_work": b"grp-3",
        "turns": b"grp-3",
        "summaries": b"grp-3",
        "outcomes": b"grp-3",
        "scores": b"grp-3",
        "policy": b"run-7",
        "train_steps": b"run-7",
        "dlq": b"grp-3",  # the original record's key
        "evals": b"eval-7",
    }
    sample_of = {
        "work": "work_request",
        "eval_work": "work_request",
        "turns": "turn",
        "summaries": "summary",
        "outcomes": "outcome",
        "scores": "score",
        "policy": "policy_version",
        "train_steps": "train_step",
        "dlq": "dead_letter",
        "evals": "eval_report",
    }
    assert set(expected) == set(BY_NAME)
    for topic, key in expected.items():
        assert key_of(BY_NAME[topic], SAMPLES[sample_of[topic]]) == key, topic


def test_golden_bytes_from_v2_decode_with_their_new_fields() -> None:
    """v2 added ``TrainStep.attempts`` (the attempt each trained episode's calls came from)."""
    step = decode((GOLDEN / "v2" / "train_step.msgpack").read_bytes())
    assert step == msgspec.structs.replace(SAMPLES["train_step"], attempts={"ep-1": 1764547200123, "ep-2": 0})


def test_golden_bytes_from_v3_decode_with_their_new_fields() -> None:
    """v3 added ``WorkRequest.teacher`` (a demonstration episode: the teacher's forced completions)."""
    work = decode((GOLDEN / "v3" / "work_request.msgpack").read_bytes())
    assert work == msgspec.structs.replace(SAMPLES["work_request"], teacher="oracle", seed=7)
    assert decode((GOLDEN / "v1" / "work_request.msgpack").read_bytes()).teacher is None


def test_golden_bytes_from_v5_decode_with_their_new_fields() -> None:
    """v5 added ``TrainStep.retrain_of`` (the run a ``cua-stream retrain`` step trained again); a step
    written before it is a step of live training."""
    step = decode((GOLDEN / "v5" / "train_step.msgpack").read_bytes())
    assert step == msgspec.structs.replace(SAMPLES["train_step"], retrain_of="run-6", attempts={"ep-1": 0})
    assert decode((GOLDEN / "v1" / "train_step.msgpack").read_bytes()).retrain_of == ""


def _forged_report(change: Callable[[dict[str, Any]], None]) -> bytes:
    """The sample evaluation report's bytes with ``change`` applied to its fields, as anyone who can write
    to the evals topic could publish them (no constructor in the way)."""
    fields = msgspec.to_builtins(SAMPLES["eval_report"])
    change(fields)
    return msgspec.msgpack.encode(fields)


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """Set ``tasks.0.successes``-style ``path`` to ``value``."""

    def change(fields: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = fields
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value

    return change


FORGED_REPORTS = {
    # the dashboard showed these as measured: success "3.33 (-10/-3)", a rate of 1e15
    "negative counts": lambda f: f["tasks"][1].update(successes=-10, scored=-3),
    "a rate above 1": _set("tasks.1.high", 1e15),
    "a rate below 0": _set("tasks.0.low", -0.5),
    "a NaN rate": _set("tasks.0.low", math.nan),
    "more successes than scored": _set("tasks.1.successes", 6),
    "more scored than episodes": lambda f: f["tasks"][1].update(successes=7, scored=7),
    "more discards than episodes": _set("tasks.0.discards", {"sandbox_lost": 99}),
    "a negative discard count": _set("tasks.0.discards", {"sandbox_lost": -1}),
    "an interval upside down": lambda f: f["tasks"][0].update(low=0.9, high=0.1),
    "pass@k above 1": _set("tasks.0.pass_at", {1: 0.8, 2: 1e15}),
    "pass@0": _set("tasks.0.pass_at", {0: 0.5}),
    "an infinite mean reward": _set("tasks.0.mean_reward", math.inf),
    "negative turns": _set("tasks.0.mean_turns", -3.0),
    "negative samples": _set("samples", -2),
    "a negative version": _set("policy_version", -5),
    "a NaN success threshold": _set("success_at", math.nan),
}


@pytest.mark.parametrize("forged", sorted(FORGED_REPORTS))
def test_an_eval_report_outside_its_ranges_is_refused_at_decode(forged: str) -> None:
    """Counts are never negative, successes <= scored <= episodes, rates lie in [0, 1], numbers are
    finite: a record that breaks one is undecodable, so readers dead-letter or skip it."""
    data = _forged_report(FORGED_REPORTS[forged])
    with pytest.raises(msgspec.ValidationError):
        decode(data)
    with pytest.raises(UndecodableRecord):
        decode_record(EVALS, topic="cua.evals", partition=0, offset=7, key=b"eval-7", value=data,
                      headers=headers_for(SAMPLES["eval_report"]), timestamp_ms=0)  # fmt: skip
    assert decode(_forged_report(lambda f: None)) == SAMPLES["eval_report"]  # the unforged one decodes
