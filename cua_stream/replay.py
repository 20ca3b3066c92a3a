"""Replay a topic range: to a file (JSONL for people, msgpack for machines) or re-published under a new
run prefix, byte-for-byte (same keys, values, headers, partitions, per-partition order).

A record that no longer decodes is still replayed: it is the run's history, and a debugging session is
often about exactly that record. JSONL lines carry the raw value (base64) beside the decoded event, so a
JSONL file loses nothing either (a null header value stays null).

Both formats start with a header naming the file format and the event schema it was written under
(``FILE_FORMAT``, ``events.SCHEMA``), so a reader can tell what it holds; files from before the header
existed are still read.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
from aiokafka.structs import ConsumerRecord

from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.codec import OutRecord, header_text, json_line
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import Bound, read_raw
from cua_stream.config import BusConfig
from cua_stream.events import SCHEMA, decode, to_builtins
from cua_stream.topics import TopicSpec

FileFormat = Literal["jsonl", "msgpack"]
FILE_FORMAT = "cua-stream-replay/1"
_MSGPACK_MAGIC = b"CUA-REPLAY\n"
"""First bytes of a msgpack replay file (then one length-prefixed header, then the records)."""


class ReplayHeader(msgspec.Struct, frozen=True, kw_only=True):
    """What a replay file holds: its format, the event schema, the source topic and range."""

    format: str = FILE_FORMAT
    schema: str = SCHEMA
    topic: str
    start: str
    end: str
    written_at: float


class ReplayedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One record as replay writes it (msgpack files hold a stream of these)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class ReplayResult:
    records: int
    per_partition: dict[int, int]
    destination: str


def _record(msg: ConsumerRecord) -> ReplayedRecord:
    return ReplayedRecord(
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        timestamp_ms=msg.timestamp,
        key=msg.key,
        value=msg.value,
        headers=[(k, None if v is None else bytes(v)) for k, v in (msg.headers or ())],
    )


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def jsonl_line(rec: ReplayedRecord) -> str:
    """One JSON object per record: coordinates, key, headers as text, decoded event, raw value."""
    doc: dict[str, Any] = {
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp_ms": rec.timestamp_ms,
        "key": rec.key.decode(errors="replace") if rec.key is not None else None,
        "headers": header_text(rec.headers),
    }
    try:
        doc["event"] = to_builtins(decode(rec.value)) if rec.value is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        doc["event"] = None
        doc["decode_error"] = str(e)
    doc["raw"] = {
        "key": _b64(rec.key),
        "value": _b64(rec.value),
        "headers": [[k, _b64(v)] for k, v in rec.headers],
    }
    return json_line(doc)


def read_header(path: Path) -> ReplayHeader | None:
    """The file's header (None for a file written before headers existed)."""
    if path.suffix == ".jsonl":
        with path.open() as f:
            first = json.loads(f.readline() or "{}")
        return msgspec.convert(first, ReplayHeader) if first.get("format") else None
    with path.open("rb") as f:
        head = f.read(len(_MSGPACK_MAGIC) + 4)
        if not head.startswith(_MSGPACK_MAGIC):
            return None
        n = int.from_bytes(head[len(_MSGPACK_MAGIC) :], "big")
        return msgspec.msgpack.decode(f.read(n), type=ReplayHeader)


def read_file(path: Path) -> Iterator[ReplayedRecord]:
    """Records back from a replay file (either format), exactly as they were on the topic."""
    header = read_header(path)
    if header is not None and header.format != FILE_FORMAT:
        raise ValueError(f"{path}: replay format {header.format!r}; this reader knows {FILE_FORMAT!r}")
    if path.suffix == ".jsonl":
        with path.open() as f:
            for line in f:
                doc = json.loads(line)
                if "format" in doc:
                    continue
                raw = doc["raw"]
                yield ReplayedRecord(
                    topic=doc["topic"],
                    partition=doc["partition"],
                    offset=doc["offset"],
                    timestamp_ms=doc["timestamp_ms"],
                    key=None if raw["key"] is None else base64.b64decode(raw["key"]),
                    value=None if raw["value"] is None else base64.b64decode(raw["value"]),
                    headers=[(k, None if v is None else base64.b64decode(v)) for k, v in raw["headers"]],
                )
    else:
        decoder = msgspec.msgpack.Decoder(ReplayedRecord)
        with path.open("rb") as f:
            data = f.read()
        # The file is a sequence of length-prefixed msgpack records (4-byte big-endian length), after
        # the magic and the length-prefixed header.
        pos = 0
        if data.startswith(_MSGPACK_MAGIC):
            pos = len(_MSGPACK_MAGIC)
            pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
        while pos < len(data):
            n = int.from_bytes(data[pos : pos + 4], "big")
            yield decoder.decode(data[pos + 4 : pos + 4 + n])
            pos += 4 + n


async def replay_to_file(
    config: BusConfig,
    spec: TopicSpec,
    start: Bound,
    end: Bound,
    out: Path,
    *,
    partitions: list[int] | None = None,
) -> ReplayResult:
    fmt: FileFormat = "jsonl" if out.suffix == ".jsonl" else "msgpack"
    topic = config.topics().name_of(spec)
    encoder = msgspec.msgpack.Encoder()
    counts: dict[int, int] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    header = ReplayHeader(topic=topic, start=_bound_text(start), end=_bound_text(end), written_at=time.time())
    with out.open("w" if fmt == "jsonl" else "wb") as f:
        if fmt == "jsonl":
            f.write(json_line(msgspec.to_builtins(header)) + "\n")
        else:
            encoded = msgspec.msgpack.encode(header)
            f.write(_MSGPACK_MAGIC + len(encoded).to_bytes(4, "big") + encoded)
        async for msg in read_raw(config, topic, start=start, end=end, partitions=partitions):
            rec = _record(msg)
            if fmt == "jsonl":
                f.write(jsonl_line(rec) + "\n")
            else:
                body = encoder.encode(rec)
                f.write(len(body).to_bytes(4, "big") + body)
            counts[rec.partition] = counts.get(rec.partition, 0) + 1
    return ReplayResult(sum(counts.values()), counts, str(out))


def _bound_text(bound: Bound) -> str:
    return bound.kind if bound.kind in ("beginning", "end") else f"{bound.kind}:{bound.value}"


async def replay_to_prefix(
    config: BusConfig,
    spec: TopicSpec,
    start: Bound,
    end: Bound,
    new_prefix: str,
    *,
    partitions: list[int] | None = None,
) -> ReplayResult:
    """Re-publish the range to ``<new_prefix>.<topic>`` (created like the source if missing), keeping each
    record's key, value, headers and partition number."""
    if new_prefix == config.topic_prefix:
        raise ValueError("replay into the source prefix would append the range to itself; pick a new prefix")
    target_config = msgspec.structs.replace(config, topic_prefix=new_prefix)
    async with TopicAdmin(target_config) as admin:
        await admin.create((spec,))
    source = config.topics().name_of(spec)
    target = target_config.topics().name_of(spec)
    counts: dict[int, int] = {}
    async with EventProducer(target_config) as producer:
        futures = []
        async for msg in read_raw(config, source, start=start, end=end, partitions=partitions):
            rec = OutRecord(target, msg.key, msg.value, list(msg.headers or ()))
            futures.append(await producer.send_record(rec, partition=msg.partition))
            counts[msg.partition] = counts.get(msg.partition, 0) + 1
        for fut in futures:
            await fut
    return ReplayResult(sum(counts.values()), counts, target)
