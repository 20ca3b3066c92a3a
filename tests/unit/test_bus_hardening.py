"""The bus's pure parts under adversarial input: identities at the decode boundary, dead letters that
always fit, null header values, strict JSON lines, our own partitioner, and the policy table deciding
what a handler's failure means (unit tests; the broker-backed versions are in tests/integration)."""

from __future__ import annotations

import hashlib
import json
import os
import random

import msgspec
import pytest
from aiokafka.partitioner import DefaultPartitioner

from cua_stream.bus.codec import (
    DEAD_LETTER_BUDGET,
    DEAD_LETTER_HEADERS,
    dead_letter,
    decode_record,
    encode_record,
    header_text,
    json_line,
)
from cua_stream.bus.consumer import handler_action, loop_action, transform_failure
from cua_stream.errors import (
    Action,
    BusUnavailable,
    ConfigError,
    InvalidIdentity,
    TransformFailed,
    UndecodableRecord,
)
from cua_stream.events import DeadLetter, decode, encode, headers_for
from cua_stream.topics import DLQ, OUTCOMES, partition_of
from tests.unit.samples import SAMPLES


def consumed(event_bytes: bytes, headers: tuple = ()) -> dict:
    return {
        "topic": "t.outcomes",
        "partition": 0,
        "offset": 5,
        "key": b"g",
        "value": event_bytes,
        "headers": headers,
        "timestamp_ms": 0,
    }


@pytest.mark.parametrize("field", ["run_id", "group_id", "episode_id"])
@pytest.mark.parametrize("value", ["", "x" * 513, "ep\n1"])
def test_an_episode_record_with_a_bad_identity_is_refused_both_ways(field: str, value: str) -> None:
    # the gateway's rule for a session's ids (cua_stream.identity): empty, too long, unprintable
    bad = msgspec.structs.replace(SAMPLES["outcome"], **{field: value})
    with pytest.raises(InvalidIdentity, match=field):
        decode_record(OUTCOMES, **consumed(encode(bad)))
    with pytest.raises(InvalidIdentity, match=field):
        encode_record("t.outcomes", OUTCOMES, bad)  # never produced in the first place


def test_a_dead_letter_always_fits_and_says_what_was_cut() -> None:
    value, key = os.urandom(12 * 1024 * 1024), os.urandom(3 * 1024 * 1024)
    headers = (("run_id", b"r1"), ("big", os.urandom(2 * 1024 * 1024)), ("null", None))
    letter = dead_letter(
        UndecodableRecord("junk"),
        topic="t.outcomes",
        partition=1,
        offset=9,
        key=key,
        value=value,
        headers=headers,
    )
    encoded = encode(letter)
    assert len(encoded) < DEAD_LETTER_BUDGET + 64 * 1024  # under the broker's 1 MiB default
    back = decode(encoded)
    assert isinstance(back, DeadLetter)
    assert {t.part: (t.size, t.sha256) for t in back.trimmed} == {
        "value": (len(value), hashlib.sha256(value).hexdigest()),
        "key": (len(key), hashlib.sha256(key).hexdigest()),
        "header:big": (len(headers[1][1]), hashlib.sha256(headers[1][1]).hexdigest()),
    }
    assert value.startswith(back.value) and key.startswith(back.key) and len(back.value) > 0
    assert back.null_headers == (2,) and back.headers[2] == ("null", b"") and back.run_id == "r1"


@pytest.mark.parametrize("count", [28_000, 200_000])
def test_a_dead_letter_of_a_record_with_countless_headers_still_fits(count: int) -> None:
    # Before: every header listed, each small one trimmed with its own size and hash once the budget was
    # spent: 7.3 MB for 28,000 headers, 53 MB for 200,000 (a 226 KB gzip batch the broker accepts), and
    # the scorer crash-looped on the record.
    headers = (("run_id", b"r1"), ("trace", None), *((f"h{i:06d}", b"x" * 20) for i in range(count)))
    letter = dead_letter(
        UndecodableRecord("junk"), topic="t", partition=0, offset=3, key=b"k", value=b"v", headers=headers
    )
    encoded = encode(letter)
    assert len(encoded) < DEAD_LETTER_BUDGET + 64 * 1024
    back = decode(encoded)
    assert isinstance(back, DeadLetter)
    assert back.headers[:2] == (("run_id", b"r1"), ("trace", b"")) and back.null_headers == (1,)
    assert len(back.headers) == DEAD_LETTER_HEADERS and back.run_id == "r1"
    (rest,) = back.trimmed
    assert rest.part == f"headers[{DEAD_LETTER_HEADERS}:{len(headers)}]"
    assert rest.size == sum(len(k) + len(v or b"") for k, v in headers[DEAD_LETTER_HEADERS:])
    assert len(rest.sha256) == 64
    other = dead_letter(
        UndecodableRecord("junk"), topic="t", partition=0, offset=3, key=b"k", value=b"v",
        headers=(*headers[:-1], ("h-other", b"x" * 20)),
    )  # fmt: skip
    assert other.trimmed[0].sha256 != rest.sha256  # the hash tells the lists apart


def test_huge_header_names_and_values_are_cut_to_fit() -> None:
    headers = tuple((("n" * 100_000) + str(i), os.urandom(300_000)) for i in range(40))
    letter = dead_letter(
        UndecodableRecord("junk"), topic="t", partition=0, offset=3, key=None, value=b"v", headers=headers
    )
    assert len(encode(letter)) < DEAD_LETTER_BUDGET + 64 * 1024
    assert all(len(name) <= 256 for name, _ in letter.headers)


def test_a_small_dead_letter_keeps_every_byte() -> None:
    letter = dead_letter(
        UndecodableRecord("x"), topic="t", partition=0, offset=0, key=b"k", value=b"v" * 1000, headers=()
    )
    assert letter.trimmed == () and letter.value == b"v" * 1000


def test_null_header_values_decode_and_print() -> None:
    value = encode(SAMPLES["outcome"])
    headers = (*((k, v) for k, v in headers_for(SAMPLES["outcome"])), ("trace", None))
    delivery = decode_record(OUTCOMES, **consumed(value, headers))
    assert delivery.event == SAMPLES["outcome"]
    assert header_text(headers)["trace"] is None


def test_json_lines_are_strict_json_even_for_non_finite_floats() -> None:
    line = json_line({"a": float("nan"), "b": [float("inf"), -float("inf")], "c": 1.5})
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}")) == {
        "a": "NaN",
        "b": ["Infinity", "-Infinity"],
        "c": 1.5,
    }


def test_our_partitioner_is_kafkas_default_for_every_key() -> None:
    rng = random.Random(3)
    for n in (1, 2, 3, 4, 7, 12, 64):
        parts = list(range(n))
        for _ in range(300):
            key = rng.randbytes(rng.randrange(0, 40))
            kafkas = DefaultPartitioner()(key, parts, parts)
            assert partition_of(key, n) == kafkas
            assert partition_of(key, n) == kafkas  # memoised: the second answer is the first's
            assert partition_of(bytearray(key), n) == kafkas


def test_the_policy_table_decides_what_a_handler_failure_means() -> None:
    assert handler_action(TypeError("a bug on one record")) is Action.DEAD_LETTER
    assert handler_action(BusUnavailable("down")) is Action.RETRY
    assert handler_action(ConfigError("bad")) is Action.CRASH
    assert isinstance(transform_failure(KeyError("x")), TransformFailed)
    assert transform_failure(KeyError("x")).reason == "transform_error"
    from aiokafka.errors import KafkaConnectionError

    assert loop_action(KafkaConnectionError()) is Action.RETRY
    assert loop_action(ValueError("bug in the loop")) is Action.CRASH
    assert DLQ.key == "original"
