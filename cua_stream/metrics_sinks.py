"""Scalars for TensorBoard and Weights & Biases, from a run's records on the train_steps topic. Pure.

A ``TrainStep`` becomes ``train/*`` and ``time/*`` scalars at its ``step``; the ``GroupDropped``
records of the groups dropped while that step's batch was gathered become ``drops/<reason>`` counts
(and ``drops/total``) at the same step. The writers (``cua_stream.metrics_writers``) and the sink
(``MetricsSink``) that feeds them are at the edge; the mapping here does no I/O so the trainer's live
sink and ``cua-stream export-metrics`` cannot disagree on a tag or a step.

Which step a drop counts at: a drop carries the trainer's version when it was dropped (``v``); the
trainer publishes it with the commit of the step that produces ``v + 1`` (the next one), so it counts at
that step. Drops decided after a run's last step wait (``Charged.waiting``) until that step exists: a
count written before its step is complete would have to be written again.

Staleness, when the run's ``WorkRequest`` records are among the records (``export-metrics`` reads the
work topic; the trainer's live sink has only its commits, so its steps carry none): how many versions
each trained group's rollouts lagged the weights the step trained (the dashboard's count, with
``cua_stream.versions.staleness``), as ``staleness/mean`` and ``staleness/max``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from cua_stream.events import Event, GroupDropped, TrainStep, WorkRequest
from cua_stream.versions import staleness, trained_from

SinkKind = Literal["tensorboard", "wandb"]
KINDS: tuple[str, ...] = get_args(SinkKind)

RENAMED = {"mean_reward": "train/reward_mean"}
"""Metric keys whose tag is not ``train/<key>`` (the names researchers look for on a board)."""
NOT_SCALARS = frozenset({"previous_push_at"})
"""Step metrics that are not worth a chart: a timestamp (the benchmarks read it from the record)."""


@dataclass(frozen=True)
class Scalar:
    tag: str
    value: float
    step: int
    wall_time: float


@dataclass(frozen=True)
class SinkSpec:
    """Where a run's scalars go: ``tensorboard:DIR`` or ``wandb:DIR``."""

    kind: SinkKind
    dir: Path

    @classmethod
    def parse(cls, text: str) -> SinkSpec:
        kind, sep, where = text.partition(":")
        if not sep or kind not in KINDS or not where:
            raise ValueError(f"{text!r}: expected KIND:DIR with KIND one of {', '.join(KINDS)}")
        return cls(kind, Path(where))  # type: ignore[arg-type]  # checked against KINDS above


def tag_of(key: str) -> str:
    """The tag of a ``TrainStep.metrics`` key: timings (``*_s``) under ``time/``, the rest under
    ``train/``. Unknown keys get a tag too, so a metric the trainer adds later shows without a change here."""
    if key in RENAMED:
        return RENAMED[key]
    return f"time/{key}" if key.endswith("_s") else f"train/{key}"


def step_scalars(
    step: TrainStep, drops: Sequence[GroupDropped] = (), issued: Mapping[str, int] | None = None
) -> list[Scalar]:
    """The scalars of one step: its loss, sizes and metrics, the drops charged to it by reason, and the
    staleness of its groups whose work version ``issued`` knows (group id -> version)."""
    at, when = step.step, step.finished_at
    values: dict[str, float] = {
        "train/loss": step.loss,
        "train/policy_version": float(step.policy_version),
        "train/n_groups": float(step.n_groups),
        "train/n_episodes": float(step.n_episodes),
        "train/n_samples": float(step.n_samples),
    }
    for key, value in step.metrics.items():
        if key not in NOT_SCALARS:
            values[tag_of(key)] = float(value)
    start = trained_from(step.policy_version)
    lags = [staleness(start, issued[g]) for g in step.group_ids if g in (issued or {})]
    if lags:
        values["staleness/mean"] = sum(lags) / len(lags)
        values["staleness/max"] = float(max(lags))
    values["drops/total"] = float(len(drops))
    for drop in drops:
        tag = f"drops/{drop.reason}"
        values[tag] = values.get(tag, 0.0) + 1.0
    return [Scalar(tag, value, at, when) for tag, value in values.items()]


@dataclass
class Charged:
    """Steps with the drops charged to them, in step order, the drops whose step is not known yet, and
    the version each group's work was issued under (from the work requests among the records)."""

    steps: list[tuple[TrainStep, list[GroupDropped]]] = field(default_factory=list)
    waiting: list[GroupDropped] = field(default_factory=list)
    issued: dict[str, int] = field(default_factory=dict)


def charge(records: Iterable[Event]) -> Charged:
    """Pair each step with its drops (module docstring); other records and other types are ignored. A
    step or drop seen twice (a trainer that republished a commit's records after a crash) counts once."""
    steps: dict[int, TrainStep] = {}
    drops: dict[str, GroupDropped] = {}
    out = Charged()
    for record in records:
        if isinstance(record, TrainStep):
            steps.setdefault(record.step, record)
        elif isinstance(record, GroupDropped):
            drops.setdefault(record.group_id, record)
        elif isinstance(record, WorkRequest):  # every episode of a group is issued under one version
            out.issued.setdefault(record.group_id, record.policy_version)
    by_version = {s.policy_version: s.step for s in steps.values()}
    charged: dict[int, list[GroupDropped]] = {n: [] for n in steps}
    for drop in drops.values():
        at = by_version.get(drop.trainer_version + 1)
        if at is None:
            out.waiting.append(drop)
        else:
            charged[at].append(drop)
    out.steps = [(steps[n], charged[n]) for n in sorted(steps)]
    return out
