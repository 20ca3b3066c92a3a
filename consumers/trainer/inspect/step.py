"""A trained step rebuilt from the run's records alone, for ``cua-stream inspect step``. Pure: the caller
reads the topics and hands the records in.

The rebuild goes the trainer's own way, so it shows what the trainer trained, not a re-implementation of
it: the step's groups are joined by ``join.Join`` (first score wins, calls deduplicated by id, other
runs skipped), each group is judged by ``judge.assess`` (each episode's scored attempt assembled into
samples, then ``groups.decide``), and the step's counts are taken as the torch backend takes them (an
episode counts once it brings a sample). The rebuild is then checked against the ``TrainStep`` record.

What the topics do not say comes from the trainer's configuration (``StepRules``): the group rules that
set the advantages and ``max_seq_len``, which cuts samples. The staleness bound is not applied to the
decision: the step record says the group trained, and the trainer's version when it judged the group is
not recorded. Under ``on_stale = "mask"`` the tokens past the bound are masked as the trainer masked
them, at the version the step trained (its ``policy_version`` - 1), with ``max_staleness``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from consumers.trainer.config import TRAINER_DEFAULTS
from consumers.trainer.episodes.samples import CallTreeError, Sample, Vocabulary
from consumers.trainer.grpo.groups import GroupDecision, GroupPolicy
from consumers.trainer.grpo.stale_mask import mask_episodes
from consumers.trainer.stream.join import Join
from consumers.trainer.stream.judge import assess
from cua_stream.bus.codec import Delivery
from cua_stream.events import Discard, Reward, TrainStep
from cua_stream.versions import trained_from


class StepRules(msgspec.Struct, frozen=True, kw_only=True):
    """The trainer settings a rebuild needs (the ``[trainer]`` section's fields of the same names, their
    defaults the group rules' and the section's)."""

    on_discard: Literal["drop_group", "keep_survivors"] = GroupPolicy.on_discard
    min_survivors: int = GroupPolicy.min_survivors
    filter_zero_variance: bool = GroupPolicy.filter_zero_variance
    std_normalize: bool = GroupPolicy.std_normalize
    negative_scale: float = GroupPolicy.negative_scale
    max_seq_len: int = TRAINER_DEFAULTS["max_seq_len"]
    on_stale: Literal["drop_group", "mask"] = GroupPolicy.on_stale
    max_staleness: int = TRAINER_DEFAULTS["max_staleness"]
    """Read only under ``on_stale = "mask"`` (the tokens the step masked)."""

    def __post_init__(self) -> None:
        # as the trainer's own config refuses them: a rebuild under rules no trainer ran reports a mismatch
        for name in ("max_seq_len", "min_survivors"):
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.{name}: must be >= 1, not {getattr(self, name)}")

    def policy(self, group_size: int) -> GroupPolicy:
        return GroupPolicy(
            group_size=group_size,
            on_discard=self.on_discard,
            min_survivors=self.min_survivors,
            filter_zero_variance=self.filter_zero_variance,
            max_staleness=None,
            std_normalize=self.std_normalize,
            negative_scale=self.negative_scale,
        )


@dataclass(frozen=True)
class EpisodeBatch:
    """One episode of a rebuilt group: its verdict, the attempt it was scored on, and its samples."""

    episode_id: str
    verdict: Reward | Discard
    attempt: int
    advantage: float | None
    """None: the episode did not train (a discarded survivor's sibling under ``keep_survivors``)."""
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class GroupBatch:
    group_id: str
    decision: GroupDecision | None
    """None: the group's records are not on the topics (retention, another prefix) or do not assemble."""
    episodes: tuple[EpisodeBatch, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class StepBatch:
    """A step rebuilt, with what the step record says it trained and where the two disagree."""

    step: TrainStep
    groups: tuple[GroupBatch, ...]
    mismatches: tuple[str, ...] = field(default=())

    @property
    def trained(self) -> list[EpisodeBatch]:
        """The episodes the step trained with a sample, in the trainer's order (its episode indexes)."""
        return [e for g in self.groups for e in g.episodes if e.advantage is not None and e.samples]

    @property
    def n_episodes(self) -> int:
        return len(self.trained)

    @property
    def n_samples(self) -> int:
        return sum(len(e.samples) for e in self.trained)

    @property
    def trained_tokens(self) -> int:
        return sum(s.trained_tokens for e in self.trained for s in e.samples)


def rebuild_step(
    step: TrainStep, records: Iterable[Delivery], rules: StepRules, vocab: Vocabulary | None = None
) -> StepBatch:
    """The batch ``step`` trained, from its run's turn, summary and score deliveries (any others, and
    other groups', are ignored), checked against the step record."""
    wanted = set(step.group_ids)
    join = Join(step.run_id, group_size=1, call_topics=())  # completeness is not asked of it here
    for delivery in records:
        if getattr(delivery.event, "group_id", None) in wanted:
            join.add(delivery, now=0.0)
    groups = tuple(_group(join, group_id, step, rules, vocab) for group_id in step.group_ids)
    batch = StepBatch(step, groups)
    return dataclasses.replace(batch, mismatches=tuple(mismatches(batch)))


def _group(
    join: Join, group_id: str, step: TrainStep, rules: StepRules, vocab: Vocabulary | None
) -> GroupBatch:
    state = join.groups.get(group_id)
    if state is None or state.scored == 0:
        return GroupBatch(group_id, None, error="no scores of the group on the topics")
    policy = rules.policy(group_size=state.scored)  # the trainer judged it once all were scored
    version = max(trained_from(step.policy_version), 0)  # read by the mask only
    try:
        judgement, _ = assess(
            state, policy=policy, version=version, max_seq_len=rules.max_seq_len, vocab=vocab
        )
    except CallTreeError as e:  # the trainer would have dropped the group as invalid_records
        return GroupBatch(group_id, None, error=f"the records do not assemble: {e}")
    decision, samples = judgement.decision, judgement.samples
    if rules.on_stale == "mask":  # as the trainer's step did
        samples, _ = mask_episodes(samples, version=version, bound=rules.max_staleness)
    episodes = tuple(
        EpisodeBatch(
            episode_id=episode_id,
            verdict=episode.score.verdict,
            attempt=episode.score.attempt,
            advantage=decision.advantages.get(episode_id),
            samples=samples.get(episode_id, ()),
        )
        for episode_id, episode in state.episodes.items()
        if episode.score is not None
    )
    return GroupBatch(group_id, decision, episodes)


def mismatches(batch: StepBatch) -> list[str]:
    """Where the rebuilt batch disagrees with its step record (empty: it is the batch the step trained)."""
    step, out = batch.step, []
    for group in batch.groups:
        if group.decision is None:
            out.append(f"group {group.group_id}: {group.error}")
        elif not group.decision.train:
            out.append(f"group {group.group_id}: judged {group.decision.reason} ({group.decision.detail})")
    if step.n_groups != len(step.group_ids):
        out.append(f"the step record counts {step.n_groups} groups but lists {len(step.group_ids)}")
    if batch.n_episodes != step.n_episodes:
        out.append(f"{batch.n_episodes} episodes rebuilt, the step trained {step.n_episodes}")
    if batch.n_samples != step.n_samples:
        out.append(f"{batch.n_samples} samples rebuilt, the step trained {step.n_samples}")
    tokens = step.metrics.get("trained_tokens")
    if tokens is not None and batch.trained_tokens != int(tokens):
        out.append(f"{batch.trained_tokens} trained tokens rebuilt, the step trained {int(tokens)}")
    attempts = {e.episode_id: e.attempt for g in batch.groups for e in g.episodes if e.advantage is not None}
    if step.attempts and attempts != step.attempts:
        out.append(f"trained episodes and attempts {attempts} differ from the step's {step.attempts}")
    return out


def version_runs(sample: Sample) -> list[tuple[int, int]]:
    """The weight versions of ``sample``'s trained tokens as runs, in token order: [(version, count)]."""
    runs: list[tuple[int, int]] = []
    for version, trained in zip(sample.token_versions, sample.loss_mask, strict=True):
        if not trained:
            continue
        if runs and runs[-1][0] == version:
            runs[-1] = (version, runs[-1][1] + 1)
        else:
            runs.append((version, 1))
    return runs


def segments(sample: Sample) -> list[tuple[bool, int, int]]:
    """``sample``'s tokens as maximal runs of the same mask: [(trained, start, end)]."""
    out: list[tuple[bool, int, int]] = []
    for i, m in enumerate(sample.loss_mask):
        if out and out[-1][0] == bool(m):
            out[-1] = (bool(m), out[-1][1], i + 1)
        else:
            out.append((bool(m), i, i + 1))
    return out
