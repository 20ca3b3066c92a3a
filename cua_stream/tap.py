"""Follow topics live: one readable line per event (or one JSON object with ``--json``).

The tap is a read-only observer: it joins no consumer group, commits nothing and dead-letters nothing;
a record it cannot decode is shown as such and skipped.

Records are written by whoever reaches the broker and the tap prints to a terminal, so no character of
a record reaches it raw that a terminal acts on: control characters (C0, DEL, C1), line and paragraph
separators and bidirectional overrides are printed as escapes (``\\x1b``, ``\\n``, ``\\u202e``), keys
included. Before, an escape sequence in an eval's policy name set the terminal's title and a newline in
a task name printed a forged tap line. ``--json`` lines are ASCII, every other character escaped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec
from aiokafka.structs import ConsumerRecord

from cua_stream.bus.codec import header_text, json_line
from cua_stream.bus.consumer import decode_message
from cua_stream.bus.follow import Follower
from cua_stream.config import BusConfig
from cua_stream.errors import RecordError
from cua_stream.events import (
    CallRecord,
    DeadLetter,
    Discard,
    EvalReport,
    Event,
    GroupDropped,
    OutcomeEvent,
    PolicyVersion,
    ScoreEvent,
    TrainerSettings,
    TrainStep,
    WorkRequest,
    tag_of,
    to_builtins,
)
from cua_stream.topics import TopicSpec

# ---------------------------------------------------------------------------------------------------
# Pure parts: filters and line rendering


@dataclass(frozen=True)
class Filter:
    """``field=value`` clauses: the same field repeated is OR, different fields are AND. A field is
    looked up in the record headers first (type, run_id, episode_id, policy_version), then on the event."""

    clauses: dict[str, frozenset[str]]

    @classmethod
    def parse(cls, specs: Sequence[str]) -> Filter:
        clauses: dict[str, set[str]] = {}
        for spec in specs:
            field, sep, value = spec.partition("=")
            if not sep or not field:
                raise ValueError(f"bad filter {spec!r}: expected field=value, e.g. type=turn")
            clauses.setdefault(field.strip(), set()).add(value.strip())
        return cls({k: frozenset(v) for k, v in clauses.items()})

    def matches(self, headers: dict[str, str | None], event: Event | None) -> bool:
        for field, wanted in self.clauses.items():
            value = headers.get(field)
            if value is None and event is not None:
                attr = getattr(event, field, None)
                value = None if attr is None else str(attr)
            if value not in wanted:
                return False
        return True


_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What a terminal acts on rather than shows: C0, DEL and C1 controls (ESC and CSI start escape sequences,
CR and LF start lines), line and paragraph separators, bidirectional embeddings, overrides and isolates."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character of ``_UNSAFE`` written as its escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _UNSAFE.sub(lambda m: _NAMED.get(m[0]) or _escape(ord(m[0])), text)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _clock(timestamp_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(timestamp_ms / 1000)) + f".{timestamp_ms % 1000:03d}"


def describe(event: Event) -> str:
    """The event-specific part of a tap line."""
    match event:
        case CallRecord():
            parent = event.parent_call_id or "root"
            return (
                f"ep={event.episode_id} seq={event.seq} {event.kind} call={event.call_id} parent={parent} "
                f"prompt+={len(event.prompt_ids)} completion={len(event.completion_ids)} "
                f"images={len(event.images)} finish={event.finish_reason} v={event.policy_version}"
            )
        case WorkRequest():
            return (
                f"ep={event.episode_id} group={event.group_id} task={event.task.name} "
                f"sample={event.sample_index + 1}/{event.group_size} v={event.policy_version}"
            )
        case OutcomeEvent():
            exc = f" exception={event.exception.type}@{event.exception.phase}" if event.exception else ""
            return (
                f"ep={event.episode_id} task={event.task} rewards={event.rewards} "
                f"end={event.early_termination_reason}{exc} calls={event.n_calls}"
            )
        case ScoreEvent():
            verdict = event.verdict
            if isinstance(verdict, Discard):
                return f"ep={event.episode_id} DISCARD {verdict.reason}"
            return f"ep={event.episode_id} reward={verdict.value:g} ({verdict.reason})"
        case PolicyVersion():
            return f"v={event.version} step={event.step} weights={event.weights_path}"
        case TrainStep():
            return (
                f"step={event.step} v={event.policy_version} groups={event.n_groups} "
                f"episodes={event.n_episodes} samples={event.n_samples} loss={event.loss:.4f}"
            )
        case TrainerSettings():
            retrain = f" retrain_of={event.retrain_of} changed={event.changed}" if event.retrain_of else ""
            return f"from step={event.step + 1} settings={len(event.settings)}{retrain}"
        case GroupDropped():
            return f"group={event.group_id} DROPPED {event.reason} {event.detail} v={event.trainer_version}"
        case DeadLetter():
            return (
                f"{event.reason} from {event.source_topic}[{event.partition}]@{event.offset}: {event.error}"
            )
        case EvalReport():
            rates = " ".join(f"{t.task}={t.successes}/{t.scored}" for t in event.tasks)
            version = f" v={event.policy_version}" if event.policy_version is not None else ""
            return f"eval policy={event.policy}{version} {rates}"
    return ""  # pragma: no cover - every record type is matched above


def render_line(msg: ConsumerRecord, event: Event | None, error: str | None) -> str:
    """One line (``printable``: whatever the record's strings hold)."""
    where = f"{_clock(msg.timestamp)} {msg.topic}[{msg.partition}]@{msg.offset}"
    if event is None:
        return printable(f"{where} !undecodable: {error}")
    return printable(f"{where} {tag_of(event)} {describe(event)}")


def render_json(msg: ConsumerRecord, event: Event | None, error: str | None) -> str:
    """One line of JSON in ASCII (``json_line``: every control and non-ASCII character escaped, keys
    included)."""
    doc = {
        "topic": msg.topic,
        "partition": msg.partition,
        "offset": msg.offset,
        "timestamp_ms": msg.timestamp,
        "headers": header_text(msg.headers or ()),
        "event": to_builtins(event) if event is not None else None,
    }
    if error is not None:
        doc["error"] = error
    return json_line(doc)


# ---------------------------------------------------------------------------------------------------
# The follower


async def follow(
    config: BusConfig,
    specs: Sequence[TopicSpec],
    *,
    emit: Callable[[str], None],
    where: Filter = Filter({}),
    as_json: bool = False,
    from_beginning: bool = False,
    count: int | None = None,
    idle_timeout_s: float | None = None,
) -> int:
    """Print matching events from ``specs`` until cancelled, ``count`` lines, or ``idle_timeout_s`` of
    silence. Returns the number of lines emitted."""
    by_name = {config.topics().name_of(s): s for s in specs}
    emitted = 0
    async with Follower(config, specs, start="beginning" if from_beginning else "end") as follower:
        last_seen = time.monotonic()
        while count is None or emitted < count:
            polled = await follower.poll(0.25)
            if polled:
                last_seen = time.monotonic()
            elif idle_timeout_s is not None and time.monotonic() - last_seen > idle_timeout_s:
                break
            for msg in polled:
                event, error = _decode(by_name, msg)
                headers = header_text(msg.headers or ())
                if not where.matches(headers, event):
                    continue
                emit((render_json if as_json else render_line)(msg, event, error))
                emitted += 1
                if count is not None and emitted >= count:
                    return emitted
    return emitted


def _decode(by_name: dict[str, TopicSpec], msg: ConsumerRecord) -> tuple[Event | None, str | None]:
    try:
        return decode_message(by_name, msg).event, None
    except (RecordError, msgspec.DecodeError) as e:
        return None, str(e)
