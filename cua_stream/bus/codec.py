"""Pure translation between events and Kafka records, including the dead-letter verdict. No I/O."""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec

from cua_stream.errors import RecordError, UndecodableRecord, UnexpectedRecordType, UnknownSchema
from cua_stream.events import SCHEMA, AnyEvent, DeadLetter, Event, decode, encode, headers_for, key_for
from cua_stream.topics import TopicSpec

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record ready for the producer."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A consumed record: the decoded event plus where it came from (and its raw bytes, for replay)."""

    event: AnyEvent
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp_ms: int


def encode_record(topic: str, spec: TopicSpec, event: Event) -> OutRecord:
    if not spec.accepts(event):
        raise UnexpectedRecordType(f"{type(event).__name__} does not belong on topic {topic!r}")
    return OutRecord(topic, key_for(event), encode(event), headers_for(event))


def header(headers: Headers | list[tuple[str, bytes]], name: str) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


def decode_record(
    spec: TopicSpec,
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
    timestamp_ms: int,
) -> Delivery:
    """Decode a consumed record or raise a RecordError saying why it must be dead-lettered."""
    schema = header(headers, "schema")
    if schema is not None and schema != SCHEMA.encode():
        raise UnknownSchema(f"schema header {schema!r}; this reader knows {SCHEMA!r}")
    if value is None:
        raise UndecodableRecord("null value (tombstone) on a topic that carries no tombstones")
    try:
        event = decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise UndecodableRecord(str(e)) from None
    if not spec.accepts(event):
        raise UnexpectedRecordType(f"{type(event).__name__} does not belong on topic {topic!r}")
    return Delivery(event, topic, partition, offset, key, value, headers, timestamp_ms)


def dead_letter(
    error: RecordError,
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
) -> DeadLetter:
    run_id = header(headers, "run_id")
    return DeadLetter(
        run_id=run_id.decode(errors="replace") if run_id else "",
        reason=error.reason,
        error=str(error),
        source_topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        headers=tuple(headers),
        at=time.time(),
    )
