"""Pure translation between events and Kafka records, including the dead-letter verdict. No I/O.

The decode boundary checks more than bytes: an episode record must name its run, group and episode
(an empty id could not be joined or deduplicated), and the same check refuses such a record before it
is ever produced. Header values may be null (Kafka allows it); everything here copes.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

import msgspec

from cua_stream.errors import (
    InvalidIdentity,
    RecordError,
    UndecodableRecord,
    UnexpectedRecordType,
    UnknownSchema,
)
from cua_stream.events import (
    SCHEMA,
    SCHEMA_BYTES,
    AnyEvent,
    DeadLetter,
    EpisodeEvent,
    Event,
    Trimmed,
    decode,
    encode,
    headers_for,
    tag_of,
)
from cua_stream.identity import identity_problem
from cua_stream.topics import TopicSpec

Headers = tuple[tuple[str, bytes | None], ...]
"""Record headers as consumed (a value may be null)."""

DEAD_LETTER_BUDGET = 512 * 1024
"""Bytes of the original record a dead letter carries at most (key + value + headers): well under the
broker's default message size (1 MiB), whatever the source record weighed (a 12 MiB value that arrived
gzip-compressed, a 3 MiB key): a dead letter that cannot be produced would stop its stage for good."""
_PREFIX = 4096
"""Bytes kept of a part that does not fit."""
DEAD_LETTER_HEADERS = 64
"""Headers a dead letter lists at most. Kafka bounds a record's headers only by the batch size, and a
226 KB gzip batch can carry 200,000 small ones: listed one by one (each trimmed part with its own size
and hash) they made a 53 MB dead letter the broker refused, and the scorer crash-looped on it. Past this
many, or past the byte budget, the rest are one ``headers[i:]`` entry in ``trimmed``."""
_NAME = 256
"""Bytes kept of a header name."""


class OutRecord(msgspec.Struct, frozen=True):
    """A record ready for the producer. (Records are made and read a few times per episode event: a
    Struct is built in ~0.3 µs, a frozen dataclass in ~3 µs, its fields set one by one through
    ``object.__setattr__``.)"""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class Delivery(msgspec.Struct, frozen=True):
    """A consumed record: the decoded event plus where it came from (and its raw bytes, for replay)."""

    event: AnyEvent
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp_ms: int


def key_of(spec: TopicSpec, event: Event) -> bytes:
    """The record key ``spec`` declares: the group id (episode topics co-partition by it), the run id,
    or a dead letter's original key."""
    if spec.key == "group_id":
        return event.group_id.encode()  # type: ignore[attr-defined]
    if spec.key == "original":
        return event.key or b"" if isinstance(event, DeadLetter) else b""
    return event.run_id.encode()


def check_identity(event: Event) -> None:
    """InvalidIdentity if an episode record's ids break ``identity.identity_problem``'s rule."""
    if isinstance(event, EpisodeEvent):
        problem = identity_problem(event.run_id, event.group_id, event.episode_id)
        if problem:
            raise InvalidIdentity(f"{tag_of(event)} record: {problem}")


def encode_record(topic: str, spec: TopicSpec, event: Event) -> OutRecord:
    if not spec.accepts(event):
        raise UnexpectedRecordType(f"{type(event).__name__} does not belong on topic {topic!r}")
    check_identity(event)
    return OutRecord(topic, key_of(spec, event), encode(event), headers_for(event))


def header(headers: Headers | list[tuple[str, bytes]], name: str) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


def header_text(headers: Headers | list[tuple[str, bytes]]) -> dict[str, str | None]:
    """Headers as text for people (tap, replay files); a null value stays None."""
    return {k: None if v is None else bytes(v).decode(errors="replace") for k, v in headers}


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
    if schema is not None and schema != SCHEMA_BYTES:
        raise UnknownSchema(f"schema header {schema!r}; this reader knows {SCHEMA!r}")
    if value is None:
        raise UndecodableRecord("null value (tombstone) on a topic that carries no tombstones")
    try:
        event = decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise UndecodableRecord(str(e) or type(e).__name__) from None
    if not spec.accepts(event):
        raise UnexpectedRecordType(f"{type(event).__name__} does not belong on topic {topic!r}")
    check_identity(event)
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
    budget: int = DEAD_LETTER_BUDGET,
) -> DeadLetter:
    """The DeadLetter for a record, always small enough to produce: parts beyond ``budget`` keep a
    prefix, and their full size and sha256 are listed in ``trimmed``."""
    run_id = header(headers, "run_id")
    trimmed: list[Trimmed] = []

    def fit(part: str, data: bytes | None) -> bytes | None:
        nonlocal budget
        if data is None:
            return None
        if len(data) <= budget:
            budget -= len(data)
            return data
        trimmed.append(Trimmed(part=part, size=len(data), sha256=hashlib.sha256(data).hexdigest()))
        kept = data[: min(_PREFIX, max(budget, 0))]
        budget -= len(kept)
        return kept

    kept_value = fit("value", value)
    kept_key = fit("key", key)
    kept_headers: list[tuple[str, bytes]] = []
    for i, (name, v) in enumerate(headers):
        if i == DEAD_LETTER_HEADERS:
            trimmed.append(_rest_of_headers(headers, i))
            break
        short = _text(name)[:_NAME]
        budget -= len(short.encode())
        kept_headers.append((short, fit(f"header:{short}", v) or b""))
    listed = len(kept_headers)
    return DeadLetter(
        run_id=run_id.decode(errors="replace")[:256] if run_id else "",
        reason=error.reason,
        error=str(error)[:2000],
        source_topic=topic,
        partition=partition,
        offset=offset,
        key=kept_key,
        value=kept_value,
        headers=tuple(kept_headers),
        null_headers=tuple(i for i, (_, v) in enumerate(headers[:listed]) if v is None),
        trimmed=tuple(trimmed),
        at=time.time(),
    )


def _text(name: str | bytes) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes) else name


def _rest_of_headers(headers: Headers, start: int) -> Trimmed:
    """One ``trimmed`` entry for headers ``start..``: how many, their bytes, and a hash over them (each
    name and value length-prefixed, so different header lists never hash alike)."""
    digest, size = hashlib.sha256(), 0
    for name, v in headers[start:]:
        for part in (_text(name).encode(), v):
            data = b"" if part is None else part
            digest.update((-1 if part is None else len(data)).to_bytes(8, "big", signed=True) + data)
            size += len(data)
    return Trimmed(part=f"headers[{start}:{len(headers)}]", size=size, sha256=digest.hexdigest())


def json_line(doc: Any) -> str:
    """One line of strict JSON: non-finite floats (which msgpack carries) become the strings "NaN",
    "Infinity" and "-Infinity" instead of the bare tokens Python's json writes and JSON forbids."""
    return json.dumps(_finite(doc), separators=(",", ":"), allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
