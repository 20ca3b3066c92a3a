"""The topic registry: each topic's name, value types, key, partitions and cleanup policy, declared once.

Producers, consumers, replay and tap take a ``TopicSpec`` (or look one up here), never a bare string.
Episode topics (work, eval_work, turns, summaries, outcomes, scores) share one partition count and the
``group_id`` key, so a GRPO group's records land on the same partition number of every topic: the
trainer joins them without crossing partitions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from cua_stream.errors import UnknownTopicError
from cua_stream.events import (
    DeadLetter,
    EvalReport,
    Event,
    GroupDropped,
    OutcomeEvent,
    PolicyVersion,
    ScoreEvent,
    SummaryEvent,
    TrainerSettings,
    TrainStep,
    TurnEvent,
    WorkRequest,
)
from cua_stream.identity import is_eval_run

DAY_MS = 24 * 3600 * 1000
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class TopicSpec:
    """One topic. ``name`` is the logical name; ``Topics.name_of`` adds the deployment prefix."""

    name: str
    value_types: tuple[type[Event], ...]
    key: Literal["group_id", "run_id", "original"]
    cleanup_policy: Literal["delete", "compact"]
    retention_ms: int | None
    """Delete-retention (None: broker default). The episode log is sized to the replay window."""
    episode_partitioned: bool
    """True: uses the shared episode partition count (co-partitioned by group_id)."""
    doc: str

    def accepts(self, event: Event) -> bool:
        return isinstance(event, self.value_types)


WORK = TopicSpec(
    "work",
    (WorkRequest,),
    "group_id",
    "delete",
    7 * DAY_MS,
    True,
    "episodes to run: training runs' (the training lane's producers); the trainer writes it",
)
EVAL_WORK = TopicSpec(
    "eval_work",
    (WorkRequest,),
    "group_id",
    "delete",
    7 * DAY_MS,
    True,
    "evaluations' episodes to run (``eval-`` runs; the eval lane's producers): apart from training's "
    "work, so the principal that issues evaluations cannot write work a training producer plays",
)
TURNS = TopicSpec(
    "turns", (TurnEvent,), "group_id", "delete", 7 * DAY_MS, True, "agent-loop completions from the gateway"
)
SUMMARIES = TopicSpec(
    "summaries", (SummaryEvent,), "group_id", "delete", 7 * DAY_MS, True, "compactor completions"
)
OUTCOMES = TopicSpec(
    "outcomes", (OutcomeEvent,), "group_id", "delete", 7 * DAY_MS, True, "how each episode's trial ended"
)
SCORES = TopicSpec(
    "scores", (ScoreEvent,), "group_id", "delete", 7 * DAY_MS, True, "reward or reason-coded discard"
)
POLICY = TopicSpec(
    "policy", (PolicyVersion,), "run_id", "compact", None, False, "latest weight version per run"
)
TRAIN_STEPS = TopicSpec(
    "train_steps",
    (TrainStep, GroupDropped, TrainerSettings),
    "run_id",
    "delete",
    30 * DAY_MS,
    False,
    "trainer steps and metrics, every group the trainer dropped with its reason, and the settings it "
    "trained with (each start or resume): kept as long as the steps they explain",
)
DLQ = TopicSpec(
    "dlq", (DeadLetter,), "original", "delete", 30 * DAY_MS, False, "records no consumer could process"
)

EVALS = TopicSpec(
    "evals",
    (EvalReport,),
    "run_id",
    "delete",
    365 * DAY_MS,
    False,
    "evaluation results, per task and overall (the episodes are on the episode topics under eval- run ids)",
)


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java client (and aiokafka) gives ``key`` among ``partitions``: murmur2, sign
    bit cleared, modulo the count. cua-stream's producers send every episode record to this partition
    explicitly, so a group's records co-partition whatever client library wrote them or reads them
    (librdkafka's default partitioner, for one, hashes keys with crc32)."""
    return _partition_of(bytes(key), partitions)


@functools.lru_cache(maxsize=1 << 14)
def _partition_of(key: bytes, partitions: int) -> int:
    """Memoised: every record of a group (its turns, summaries, outcomes and scores, a few dozen) carries
    the same key, and the hash in Python costs ~4 µs a record against ~0.1 µs for the lookup."""
    return (_murmur2(key) & 0x7FFFFFFF) % partitions


def _murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 with Kafka's seed, as a signed int (Kafka's ``Utils.murmur2``)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if tail:
        for i in reversed(range(len(tail))):
            h ^= tail[i] << (8 * i)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def work_topic(run_id: str) -> TopicSpec:
    """The topic ``run_id``'s work goes on: an evaluation's (``eval-``) on its own, a training run's on
    the work topic."""
    return EVAL_WORK if is_eval_run(run_id) else WORK


ALL: tuple[TopicSpec, ...] = (
    WORK,
    EVAL_WORK,
    TURNS,
    SUMMARIES,
    OUTCOMES,
    SCORES,
    POLICY,
    TRAIN_STEPS,
    DLQ,
    EVALS,
)
BY_NAME: dict[str, TopicSpec] = {spec.name: spec for spec in ALL}


@dataclass(frozen=True)
class Topics:
    """The registry bound to one deployment: a prefix and partition counts."""

    prefix: str = "cua"
    episode_partitions: int = 4
    other_partitions: int = 1
    replication_factor: int = 1

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise ValueError(f"topic prefix {self.prefix!r} must match {_PREFIX_RE.pattern}")
        if self.episode_partitions < 1 or self.other_partitions < 1 or self.replication_factor < 1:
            raise ValueError("partition counts and replication factor must be >= 1")

    def name_of(self, spec: TopicSpec) -> str:
        return f"{self.prefix}.{spec.name}"

    def partitions_of(self, spec: TopicSpec) -> int:
        return self.episode_partitions if spec.episode_partitioned else self.other_partitions

    def configs_of(self, spec: TopicSpec) -> dict[str, str]:
        """Topic-level broker configs for ``spec``."""
        configs = {"cleanup.policy": spec.cleanup_policy}
        if spec.retention_ms is not None:
            configs["retention.ms"] = str(spec.retention_ms)
        if spec.cleanup_policy == "compact":
            configs["min.cleanable.dirty.ratio"] = "0.1"
        return configs

    def resolve(self, name: str) -> TopicSpec:
        """A spec from a logical name (``turns``) or a qualified one (``cua.turns``)."""
        logical = name.removeprefix(f"{self.prefix}.")
        try:
            return BY_NAME[logical]
        except KeyError:
            known = ", ".join(self.name_of(s) for s in ALL)
            raise UnknownTopicError(f"unknown topic {name!r}; known topics: {known}") from None

    def spec_of_qualified(self, qualified: str) -> TopicSpec | None:
        """The spec of a qualified name under this prefix, or None."""
        if not qualified.startswith(f"{self.prefix}."):
            return None
        return BY_NAME.get(qualified[len(self.prefix) + 1 :])

    def with_prefix(self, prefix: str) -> Topics:
        return Topics(prefix, self.episode_partitions, self.other_partitions, self.replication_factor)
