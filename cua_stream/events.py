"""The event contract: every record that travels on a cua-stream topic.

Each record is a frozen, keyword-only msgspec Struct with a tag in the ``type`` field, encoded as
msgpack. Record headers (``schema``, ``type``, ``run_id``, ``episode_id``, ``policy_version``) let a
consumer route or filter without decoding the payload. This module is the only place that defines wire
Structs; the encoders and decoders below are built once, at import.

Schema evolution rules (checked by golden files under ``tests/golden``):

1. A new field always has a default, so records written before it still decode.
2. A field's type never changes; a field is never renamed or removed while any retained topic holds it.
3. Readers ignore fields they do not know (msgspec's default), so an older reader accepts newer records.
4. A breaking change gets a new tag (``turn.v2``) and an upgrade function at the decode boundary, and
   ``SCHEMA`` moves to the next major version; a record with an unknown ``schema`` header is dead-lettered.

Token ids and logprobs travel as packed arrays (``cua_stream.packed``).
"""

from __future__ import annotations

import enum
import sys
from typing import Annotated, Any

import msgspec

from cua_stream.packed import Logprobs, TokenIds, dec_hook, enc_hook, json_enc_hook

SCHEMA = "cua-stream/1"
"""Wire schema name and major version; carried in every record's ``schema`` header."""
SCHEMA_BYTES = SCHEMA.encode()
"""The ``schema`` header's value, as written and as checked (encoded once, not per record)."""

# ---------------------------------------------------------------------------------------------------
# Building blocks (not records on their own)


class CallKind(enum.StrEnum):
    """Which computer-1 call site produced an LLM completion."""

    AGENT_TURN = "agent_turn"
    COMPACTION_SUMMARY = "compaction_summary"
    COMPACTION_SHORT_SUMMARY = "compaction_short_summary"
    FINAL_ANSWER = "final_answer"


CALL_KIND_FIELD = "cua_call_kind"
"""Request-body field that carries the CallKind from the agent to the session gateway."""

SUMMARY_KINDS = frozenset({CallKind.COMPACTION_SUMMARY, CallKind.COMPACTION_SHORT_SUMMARY})


class Phase(enum.StrEnum):
    """Trial phase in which an exception escaped."""

    ENVIRONMENT = "environment"
    AGENT_SETUP = "agent_setup"
    AGENT = "agent"
    VERIFIER = "verifier"


class DiscardReason(enum.StrEnum):
    """Why an episode is excluded from training rather than scored."""

    SANDBOX_LOST = "sandbox_lost"
    SERVER_UNAVAILABLE = "server_unavailable"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    ABANDONED = "abandoned"
    """The trial was cancelled (producer shutdown or abandonment) before it ended."""
    STALE = "stale"
    """The work was already older than the trainer's staleness bound when a producer took it: not run."""
    TASK_NOT_ALLOWED = "task_not_allowed"
    """The work named a task directory outside the producer's task roots (``producer.task_roots``, the
    bundled tasks): not run (whoever may write work must not choose what a producer's host runs)."""


class TaskRef(msgspec.Struct, frozen=True, kw_only=True):
    """A task an episode runs: a Harbor task directory or a registry name."""

    name: str
    path: str | None = None
    dataset: str | None = None


Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
"""A content hash as the blob store names blobs: 64 lowercase hex digits. Checked at decode, so a hash
can never carry markup into a page that shows the image (a dashboard once ran a script from one)."""


class ImageRef(msgspec.Struct, frozen=True, kw_only=True):
    """A screenshot held in the blob store (claim-check): the event carries only its hash."""

    sha256: Sha256
    size: int
    width: int
    height: int
    mime: str = "image/png"
    grid_thw: tuple[int, int, int] | None = None


class VersionSpan(msgspec.Struct, frozen=True, kw_only=True):
    """Completion tokens [start, end) were sampled with weights of ``version``."""

    version: int
    start: int
    end: int


class ExceptionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An exception that escaped a trial, as the scorer needs it."""

    type: str
    message: str
    phase: Phase
    module: str = ""
    status_code: int | None = None


class Reward(msgspec.Struct, frozen=True, kw_only=True, tag="reward", tag_field="verdict"):
    """The episode is scored: ``value`` is its reward, ``reason`` says why (``ok`` for a clean finish)."""

    value: float
    reason: str = "ok"


class Discard(msgspec.Struct, frozen=True, kw_only=True, tag="discard", tag_field="verdict"):
    """The episode is excluded from training; ``reason`` is a DiscardReason value."""

    reason: str


# ---------------------------------------------------------------------------------------------------
# Records


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every record. Not itself a record (it has no tag)."""

    run_id: str


class EpisodeEvent(Event, frozen=True, kw_only=True):
    """Base of records that belong to one episode; keyed by ``group_id`` so a group shares a partition."""

    group_id: str
    episode_id: str
    attempt: int = 0
    """Which run of the episode's work request this record belongs to. A producer numbers each run by its
    start time (ms since the epoch, strictly increasing within the producer: ``producers.attempts``), so a
    request run again after a crash, by any producer, gets a new and larger number without a coordination
    round trip. The calls of an attempt that never reached an outcome are ignored downstream (the trainer
    trains the scored attempt's calls only). 0: recorded outside a producer."""


class WorkRequest(EpisodeEvent, frozen=True, kw_only=True, tag="work_request"):
    """Run one episode of ``task``: sample ``sample_index`` of a GRPO group of ``group_size``."""

    task: TaskRef
    sample_index: int
    group_size: int
    policy_version: int
    """The trainer's policy version when the work was issued (admission control compares against it)."""
    created_at: float
    sampling: dict[str, Any] = {}
    seed: int | None = None
    """Seeds the task's layout (one per group, so a group's episodes see the same task instance); None:
    derived from ``group_id`` (``identity.layout_seed``)."""
    teacher: str | None = None
    """Record a demonstration: the episode's replies are forced completions from this scripted policy
    (e.g. ``oracle``, served under the gateway's ``teacher_url`` per task and seed), not samples."""


class CallRecord(EpisodeEvent, frozen=True, kw_only=True):
    """Shape shared by TurnEvent and SummaryEvent: one LLM completion recorded by the gateway."""

    seq: int
    """Per-episode, gap-free position across turns and summaries."""
    call_id: str
    parent_call_id: str | None = None
    """The call whose prompt+completion this request extends; None for a new root."""
    kind: CallKind
    prompt_ids: TokenIds
    """Prompt ids after the parent's prompt+completion (all of them for a root)."""
    completion_ids: TokenIds
    completion_logprobs: Logprobs
    images: tuple[ImageRef, ...] = ()
    """Images in the new prompt part, in prompt order."""
    weight_versions: tuple[VersionSpan, ...] = ()
    policy_version: int
    """The oldest weight version among the completion tokens (``weight_versions`` gives each token's)."""
    finish_reason: str
    sampling: dict[str, Any] = {}
    started_at: float
    engine_ms: float = 0.0
    gateway_ms: float = 0.0


class TurnEvent(CallRecord, frozen=True, kw_only=True, tag="turn"):
    """An agent-loop (or final-answer) completion."""


class SummaryEvent(CallRecord, frozen=True, kw_only=True, tag="summary"):
    """A compactor completion (full or short summary); trained like a turn."""


class OutcomeEvent(EpisodeEvent, frozen=True, kw_only=True, tag="outcome"):
    """How one episode's trial ended, built from Harbor's TrialResult."""

    task: str
    policy_version: int
    """Its work request's (the trainer's version when it issued the work; ``cua_stream.versions``)."""
    agent_started: bool
    exception: ExceptionRecord | None = None
    rewards: dict[str, float] | None = None
    early_termination_reason: str | None = None
    n_calls: int = 0
    """Completions the gateway recorded for this episode (turns + summaries)."""
    n_turns: int = 0
    gateway_statuses: tuple[int, ...] = ()
    """Non-2xx HTTP statuses the session gateway returned to this episode."""
    trial_name: str = ""
    started_at: float
    finished_at: float


NOT_RUN = "not_run:"
"""Prefix of an outcome's ``early_termination_reason`` when a producer refused the work at admission
(``not_run:stale``, ``not_run:task_not_allowed``); the rest is the DiscardReason the scorer gives it."""


class ScoreEvent(EpisodeEvent, frozen=True, kw_only=True, tag="score"):
    """The scorer's verdict on one episode: exactly one per episode_id."""

    verdict: Reward | Discard
    policy_version: int
    """Its outcome's, so its work request's (``cua_stream.versions``)."""
    scored_at: float


class PolicyVersion(Event, frozen=True, kw_only=True, tag="policy_version"):
    """New weights are live on the engines (compacted topic, keyed by run_id)."""

    version: int
    weights_path: str
    step: int
    published_at: float


class TrainStep(Event, frozen=True, kw_only=True, tag="train_step"):
    """One optimizer step of the trainer."""

    step: int
    policy_version: int
    """The version this step produced (its ``PolicyVersion``)."""
    n_groups: int
    n_episodes: int
    n_samples: int
    loss: float
    group_ids: tuple[str, ...] = ()
    metrics: dict[str, float] = {}
    finished_at: float
    attempts: dict[str, int] = {}
    """The episodes the step trained, each with the attempt whose calls it trained (the scored one): an
    audit of the step that needs no other record (chaos runs check it against the outcomes)."""
    retrain_of: str = ""
    """The run whose recorded step this one trained again (``cua-stream retrain``); empty: none."""


class GroupDropped(Event, frozen=True, kw_only=True, tag="group_dropped"):
    """A GRPO group the trainer will not train, and why (``reason`` from the trainer's DropReason)."""

    group_id: str
    reason: str
    detail: str = ""
    episode_ids: tuple[str, ...] = ()
    trainer_version: int
    """The trainer's policy version when it dropped the group (the same numbering as every
    ``policy_version``: ``cua_stream.versions``; the wire name predates that rule)."""
    dropped_at: float


class TrainerSettings(Event, frozen=True, kw_only=True, tag="trainer_settings"):
    """The trainer's resolved ``[trainer]`` settings (secrets left out), published each time it starts or
    resumes a run: what trains the run's next steps (``cua-stream retrain`` reads them back)."""

    settings: dict[str, Any]
    step: int
    """The steps the run had done at this start: these settings train its steps from ``step`` + 1."""
    retrain_of: str = ""
    """The run whose recorded steps this one trains again (``cua-stream retrain``); empty: none."""
    changed: dict[str, Any] = {}
    """With ``retrain_of``: the settings that differ from that run's, with their values here."""
    started_at: float


class Trimmed(msgspec.Struct, frozen=True, kw_only=True):
    """A part of a dead-lettered record too large to carry whole: only a prefix of it was kept."""

    part: str
    """``key``, ``value`` or ``header:<name>``."""
    size: int
    """Its full size in bytes."""
    sha256: str
    """The sha256 of the full bytes (to match the original, e.g. in a replay of the source topic)."""


class DeadLetter(Event, frozen=True, kw_only=True, tag="dead_letter"):
    """A record no consumer could process, kept byte-for-byte with its coordinates and the reason (parts
    too large to fit under the broker's message size keep a prefix, their size and sha256)."""

    reason: str
    error: str
    source_topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    at: float
    null_headers: tuple[int, ...] = ()
    """Positions in ``headers`` whose value was null on the wire (legal in Kafka; carried as b"")."""
    trimmed: tuple[Trimmed, ...] = ()
    """Parts cut to a prefix so the dead letter fits; empty: every byte is here."""


# An evaluation's figures are checked at decode, since pages show them as measured: a negative count, a
# rate outside [0, 1] or more successes than episodes is refused, so a reader dead-letters or skips it.
Count = Annotated[int, msgspec.Meta(ge=0)]
Rate = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
"""In [0, 1] (NaN fails the bounds too)."""
Finite = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
"""NaN and the infinities refused (msgspec checks finiteness as these two bounds)."""


class EvalTask(msgspec.Struct, frozen=True, kw_only=True):
    """One task's results in an evaluation (or all of them, under ``task`` = ``overall``)."""

    task: str
    episodes: Count
    scored: Count
    """Episodes with a reward (discards and episodes never scored are left out of the rates)."""
    successes: Count
    low: Rate
    high: Rate
    """The success rate's 95 % Wilson interval (0 and 1 with nothing scored)."""
    pass_at: dict[Annotated[int, msgspec.Meta(ge=1)], Rate] = {}
    """pass@k (the unbiased estimator) for each k up to the samples per instance."""
    mean_reward: Finite | None = None
    discards: dict[str, Count] = {}
    unscored: Count = 0
    mean_turns: Annotated[float, msgspec.Meta(ge=0.0, le=sys.float_info.max)] | None = None
    mean_seconds: Finite | None = None

    def __post_init__(self) -> None:  # the figures against each other (on decode: a ValidationError)
        if not self.successes <= self.scored <= self.episodes or self.low > self.high:
            raise ValueError(f"task {self.task!r}: not successes <= scored <= episodes and low <= high")
        if self.scored + self.unscored + sum(self.discards.values()) > self.episodes:
            raise ValueError(f"task {self.task!r}: more scored, discarded and unscored than episodes")


class EvalReport(Event, frozen=True, kw_only=True, tag="eval_report"):
    """An evaluation's results, per task and overall (keyed by the evaluation's run id, which starts with
    ``eval-``: no trainer takes its work). The episodes themselves are on the episode topics under that run
    id, and in the evaluation's results file."""

    policy: str
    """A scripted policy's name (``oracle``), or the model directory evaluated."""
    policy_version: Count | None = None
    """The training run's weight version evaluated (``of_run``); None for a model directory or a script."""
    of_run: str = ""
    """The training run whose version was evaluated (empty: none)."""
    version_published_at: Finite | None = None
    """When that version's ``PolicyVersion`` was published: ``created_at`` minus this is the evaluation's
    lag behind training."""
    environment: str
    samples: Count
    """Episodes per task instance (task and layout): the k of pass@k."""
    success_at: Finite
    """The reward at or above which an episode counts as a success."""
    layouts: Count
    tasks: tuple[EvalTask, ...]
    """Per task, then ``overall``."""
    created_at: Finite


RECORD_TYPES: tuple[type[Event], ...] = (
    WorkRequest, TurnEvent, SummaryEvent, OutcomeEvent, ScoreEvent, PolicyVersion, TrainStep, GroupDropped,
    TrainerSettings, DeadLetter, EvalReport,
)  # fmt: skip
AnyEvent = (
    WorkRequest | TurnEvent | SummaryEvent | OutcomeEvent | ScoreEvent | PolicyVersion | TrainStep
    | GroupDropped | TrainerSettings | DeadLetter | EvalReport
)  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# Encoding

_msgpack_encoder = msgspec.msgpack.Encoder(enc_hook=enc_hook)
_msgpack_decoder = msgspec.msgpack.Decoder(AnyEvent, dec_hook=dec_hook)
_json_encoder = msgspec.json.Encoder(enc_hook=json_enc_hook)
_json_decoder = msgspec.json.Decoder(AnyEvent, dec_hook=dec_hook)


def encode(event: Event) -> bytes:
    """msgpack bytes of one record (the Kafka value)."""
    return _msgpack_encoder.encode(event)


def decode(data: bytes | memoryview) -> AnyEvent:
    """Decode one record; raises msgspec.DecodeError / ValidationError on bad bytes."""
    return _msgpack_decoder.decode(data)


def to_json(event: Event) -> bytes:
    """JSON for people (CLI, JSONL replay files); arrays render as lists, bytes as hex."""
    return _json_encoder.encode(event)


def from_json(data: bytes | str) -> AnyEvent:
    return _json_decoder.decode(data)


def to_builtins(event: Event) -> dict[str, Any]:
    """Plain dict/list form (for JSON documents that embed an event)."""
    return msgspec.to_builtins(event, enc_hook=json_enc_hook)


def tag_of(event: Event | type[Event]) -> str:
    return event.__struct_config__.tag  # type: ignore[return-value]


def headers_for(event: Event) -> list[tuple[str, bytes]]:
    """Kafka record headers: enough to route or filter without decoding the payload."""
    headers = [
        ("schema", SCHEMA_BYTES),
        ("type", tag_of(event).encode()),
        ("run_id", event.run_id.encode()),
    ]
    episode_id = getattr(event, "episode_id", None)
    if episode_id is not None:
        headers.append(("episode_id", episode_id.encode()))
    version = getattr(event, "policy_version", None)
    if version is None:
        version = getattr(event, "version", None)
    if version is not None:
        headers.append(("policy_version", str(version).encode()))
    return headers
