"""Blob store and the record codec: pure or local-filesystem checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from cua_stream.blobs import LocalBlobStore, sha256_of
from cua_stream.bus.codec import dead_letter, decode_record, encode_record
from cua_stream.errors import (
    BlobCorrupted,
    BlobNotFound,
    UndecodableRecord,
    UnexpectedRecordType,
    UnknownSchema,
)
from cua_stream.topics import SCORES, TURNS
from tests.unit.samples import SAMPLES


def test_blob_put_get_exists_and_dedup(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = b"\x89PNG fake screenshot bytes"
    digest = store.put(data)
    assert digest == sha256_of(data) and store.exists(digest) and store.get(digest) == data
    assert store.put(data) == digest
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [
        store.path_of(digest)
    ]  # one copy, no temp files


def test_missing_and_corrupted_blobs_raise_clear_errors(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(BlobNotFound, match="is not in"):
        store.get("0" * 64)
    digest = store.put(b"abc")
    store.path_of(digest).write_bytes(b"abd")
    with pytest.raises(BlobCorrupted):
        store.get(digest)
    with pytest.raises(ValueError, match="not a sha256"):
        store.get("../../etc/passwd")


def _decode(value: bytes | None, headers=(), spec=TURNS):
    return decode_record(
        spec, topic="t.turns", partition=0, offset=9, key=b"k", value=value, headers=headers, timestamp_ms=0
    )


def test_codec_round_trip_and_refusals() -> None:
    rec = encode_record("t.turns", TURNS, SAMPLES["turn"])
    assert rec.key == b"grp-3" and dict(rec.headers)["type"] == b"turn"
    assert _decode(rec.value, tuple(rec.headers)).event == SAMPLES["turn"]
    with pytest.raises(UnexpectedRecordType):
        encode_record("t.turns", TURNS, SAMPLES["score"])
    with pytest.raises(UnexpectedRecordType):
        _decode(rec.value, spec=SCORES)  # a valid turn, on the scores topic
    with pytest.raises(UndecodableRecord):
        _decode(b"\xc1")
    with pytest.raises(UndecodableRecord, match="tombstone"):
        _decode(None)
    with pytest.raises(UnknownSchema, match="cua-stream/2"):
        _decode(rec.value, (("schema", b"cua-stream/2"),))


def test_dead_letter_keeps_the_record_and_its_coordinates() -> None:
    letter = dead_letter(
        UndecodableRecord("boom"), topic="t.turns", partition=3, offset=7, key=b"k", value=b"\xc1",
        headers=(("run_id", b"r1"),),
    )  # fmt: skip
    assert (letter.reason, letter.error, letter.source_topic, letter.partition, letter.offset) == (
        "undecodable", "boom", "t.turns", 3, 7,
    )  # fmt: skip
    assert (letter.run_id, letter.key, letter.value) == ("r1", b"k", b"\xc1")
