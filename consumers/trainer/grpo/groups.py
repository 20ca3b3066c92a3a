"""GRPO over groups of episodes: which groups train, their advantages, and what one step takes. Pure.

A group is the n episodes of one task drawn together. The decisions, in the order they are made:

1. **Complete**: every episode of the group is scored (a reward) or discarded. A group that is still
   missing episodes when its deadline passes is dropped as ``timeout``.
2. **Discards**: by default the whole group is dropped (as the reference does: a discarded episode is
   not the policy's doing, and the survivors alone would bias the group's baseline); with
   ``keep_survivors`` the rewarded episodes train when at least ``min_survivors`` remain.
3. **Off-policy bound**: a group whose oldest trained token was sampled by a weight version older than
   ``trainer_version - max_staleness`` is dropped as ``stale``. With ``on_stale="mask"`` it trains
   instead, its tokens past the bound masked out of the loss (``stale_mask``); only a group whose every
   trained token is past the bound (nothing left to train) is dropped as ``stale``.
4. **Zero variance** (optional): a group whose rewards are all equal has no signal; dropped.
5. **Advantages per episode** (not per sample: an episode that compacted more often gets no extra
   weight): ``(r - mean) / (std + eps)`` over the group's episodes, ``std`` unbiased (n - 1), as the
   reference; ``std_normalize=False`` gives ``r - mean`` (Dr. GRPO). Every sample of an episode gets its
   episode's advantage. With ``negative_scale`` below 1 the advantages under the group's mean are scaled
   down (0: only the episodes that beat their group are reinforced).

A training step takes whole groups until it holds ``episodes_per_step`` episodes: it never splits one.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from consumers.trainer.episodes.checks import Check
from cua_stream.errors import ReplayDiverged
from cua_stream.events import Discard, Reward
from cua_stream.versions import too_stale


class DropReason(enum.StrEnum):
    """Why a group was not trained (published and counted)."""

    DISCARDED = "discarded"
    """An episode was discarded (``drop_group``); the detail names its discard reason."""
    TOO_FEW_SURVIVORS = "too_few_survivors"
    STALE = "stale"
    ZERO_VARIANCE = "zero_variance"
    TIMEOUT = "timeout"
    NO_SAMPLES = "no_samples"
    """No episode of the group left a trainable sample (every one too long, or nothing recorded)."""
    INVALID_RECORDS = "invalid_records"
    """An episode's records break what training relies on (a call tree with a cycle or an unknown
    parent, version spans that do not cover a completion, a token id outside the vocabulary, image pads
    that do not match the images, a screenshot the step cannot take, a reward that is not a finite
    number within ``MAX_REWARD``: ``checks.Check``); the detail starts with the check's name and says
    which records, and the records at fault are dead-lettered."""


MAX_REWARD = 1e9
"""The largest reward magnitude trained. A verifier's rewards are scores, points or counts; one beyond
this is taken for a broken verifier. Below it the group's mean and deviation stay exact in float64, and
the step's float32 loss and gradients finite under Dr. GRPO too (``std_normalize=False``), whose
advantages are on the rewards' own scale."""


@dataclass(frozen=True)
class GroupPolicy:
    """The trainer's group rules (one section of its config)."""

    group_size: int
    on_discard: Literal["drop_group", "keep_survivors"] = "drop_group"
    min_survivors: int = 2
    filter_zero_variance: bool = False
    max_staleness: int | None = None
    """Versions a group's oldest token may lag the trainer's; None: no bound."""
    on_stale: Literal["drop_group", "mask"] = "drop_group"
    """A group with tokens past ``max_staleness``: ``drop_group`` drops it whole; ``mask`` trains it with
    those tokens masked out of the loss (still in the context), and drops it only when every trained
    token is past the bound (nothing left to train)."""
    std_normalize: bool = True
    epsilon: float = 1e-6
    negative_scale: float = 1.0
    """Multiplies the advantages below 0 (1: GRPO). At 0 only the episodes that beat their group's mean
    are reinforced, each by its advantage: rejection-sampling fine-tuning (RAFT, expert iteration) with
    GRPO's weights; the failed episodes then move nothing. Their tokens are where a small policy's
    update goes astray: pushing down whatever was drawn in a derailed context it never saw in SFT."""

    def __post_init__(self) -> None:
        if self.group_size < 1 or self.min_survivors < 1:
            raise ValueError("group_size and min_survivors must be >= 1")
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):  # a zero-variance group divides by it
            raise ValueError(f"epsilon must be a finite number > 0, not {self.epsilon}")
        if not self.negative_scale >= 0:
            raise ValueError(f"negative_scale must be >= 0, not {self.negative_scale}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0 (or None)")
        if self.on_stale not in ("drop_group", "mask"):
            raise ValueError(f"on_stale: 'drop_group' or 'mask', not {self.on_stale!r}")


@dataclass(frozen=True)
class EpisodeResult:
    """One finished episode as the group decision needs it."""

    episode_id: str
    verdict: Reward | Discard
    oldest_version: int
    """The oldest weight version among its trained tokens."""
    newest_version: int | None = None
    """The newest weight version among its trained tokens (``on_stale="mask"`` reads it); None: the
    same as ``oldest_version`` (one version for the whole episode)."""

    @property
    def newest(self) -> int:
        return self.oldest_version if self.newest_version is None else self.newest_version


@dataclass(frozen=True)
class GroupDecision:
    """Train the group with these advantages, or drop it for ``reason`` (``detail`` says more)."""

    advantages: Mapping[str, float] = field(default_factory=dict)
    """episode_id → advantage, for the episodes that train."""
    reason: DropReason | None = None
    detail: str = ""

    @property
    def train(self) -> bool:
        return self.reason is None


def drop(reason: DropReason, detail: str = "") -> GroupDecision:
    return GroupDecision(reason=reason, detail=detail)


def decide(
    episodes: Sequence[EpisodeResult], policy: GroupPolicy, *, trainer_version: int, timed_out: bool = False
) -> GroupDecision | None:
    """The group's fate, or None while it is still waiting for episodes (and has not timed out)."""
    if len({e.episode_id for e in episodes}) < policy.group_size:
        if not timed_out:
            return None
        return drop(DropReason.TIMEOUT, f"{len(episodes)} of {policy.group_size} episodes finished in time")
    if bad := invalid_rewards(episodes):  # the scorer never writes one; another writer may
        return drop(
            DropReason.INVALID_RECORDS,
            f"{Check.REWARD}: the reward of {', '.join(bad)} is not a finite number within ±{MAX_REWARD:g}",
        )
    discards = [e for e in episodes if isinstance(e.verdict, Discard)]
    kept = [e for e in episodes if isinstance(e.verdict, Reward)]
    if discards and policy.on_discard == "drop_group":
        return drop(DropReason.DISCARDED, ",".join(sorted({e.verdict.reason for e in discards})))
    if discards and len(kept) < policy.min_survivors:
        return drop(DropReason.TOO_FEW_SURVIVORS, f"{len(kept)} rewarded of {len(episodes)}")
    if policy.max_staleness is not None and policy.on_stale == "mask":  # over the episodes that train
        newest = max(e.newest for e in kept)
        if too_stale(trainer_version, newest, policy.max_staleness):
            return drop(
                DropReason.STALE,
                f"every trained token is stale: newest v{newest} < v{trainer_version} - {policy.max_staleness}",
            )
    elif policy.max_staleness is not None:  # over every episode, discarded ones too, as the reference does
        oldest = min(e.oldest_version for e in episodes)
        if too_stale(trainer_version, oldest, policy.max_staleness):
            return drop(
                DropReason.STALE, f"oldest token v{oldest} < v{trainer_version} - {policy.max_staleness}"
            )
    rewards = {e.episode_id: e.verdict.value for e in kept}  # type: ignore[union-attr]
    if policy.filter_zero_variance and len(set(rewards.values())) == 1:
        return drop(DropReason.ZERO_VARIANCE, f"every reward is {next(iter(rewards.values()))}")
    return GroupDecision(
        advantages=advantages(
            rewards,
            std_normalize=policy.std_normalize,
            epsilon=policy.epsilon,
            negative_scale=policy.negative_scale,
        )
    )


def invalid_rewards(episodes: Iterable[EpisodeResult]) -> list[str]:
    """The episodes whose reward is NaN, infinite (either makes every advantage of its group NaN) or
    beyond ``MAX_REWARD`` (1.7e308 in every episode overflowed the group's mean)."""
    return sorted(
        e.episode_id
        for e in episodes
        if isinstance(e.verdict, Reward) and not abs(e.verdict.value) <= MAX_REWARD  # NaN fails it too
    )


def advantages(
    rewards: Mapping[str, float],
    *,
    std_normalize: bool = True,
    epsilon: float = 1e-6,
    negative_scale: float = 1.0,
) -> dict[str, float]:
    """GRPO advantages per episode: reward minus the group mean, over the unbiased std plus ``epsilon``
    (a single episode, or ``std_normalize=False``: not divided); those below 0 times ``negative_scale``."""
    values = list(rewards.values())
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"rewards must be finite: {rewards}")
    mean = statistics.fmean(values)
    scale = 1.0
    if std_normalize and len(values) > 1:
        scale = statistics.stdev(values) + epsilon
    out = {k: (v - mean) / scale for k, v in rewards.items()}
    return {k: max(a, 0.0) + negative_scale * min(a, 0.0) for k, a in out.items()}


def carries_signal(advantages: Iterable[float], *, kl_anchor: bool = False) -> bool:
    """Whether a step over episodes with these advantages has a gradient at all. With every advantage 0
    (groups whose rewards were all equal) and no KL term the loss is 0 whatever the weights: the
    optimizer must not step, or Adam's momentum from earlier steps and its weight decay would still move
    the weights — a sparse-reward run then drifts away from its SFT start step after step without any
    reward saying so (measured: valid actions 58 % -> 1 % over 41 such steps).

    With a KL anchor (``kl_coef`` > 0) every step has a gradient, the KL's toward the reference, and
    takes it, as GRPO's loss does on every sample. That is the way back for a run whose every episode
    fails the same way: no group then carries a reward signal ever again (measured: one update made a
    click-test policy write its ``done`` under the wrong key, every episode after it failed, and 15
    steps in a row skipped)."""
    return kl_anchor or any(a != 0 for a in advantages)


@dataclass(frozen=True)
class ReadyGroup:
    """A group decided to train: its id and how many episodes it brings to a step."""

    group_id: str
    episodes: int


def next_batch(ready: Sequence[ReadyGroup], episodes_per_step: int, *, flush: bool = False) -> int:
    """How many of the ``ready`` groups (in order) the next step takes: whole groups up to
    ``episodes_per_step`` episodes (a first group larger than that goes alone). 0 while fewer episodes
    than that are ready, unless ``flush``."""
    if not ready or (not flush and sum(g.episodes for g in ready) < episodes_per_step):
        return 0
    taken = total = 0
    for group in ready:
        if taken and total + group.episodes > episodes_per_step:
            break
        taken += 1
        total += group.episodes
        if total >= episodes_per_step:
            break
    return taken


def recorded_batch(
    queued: Sequence[str],
    wanted: Sequence[str],
    decided: Collection[str] = frozenset(),
    *,
    rejudge: bool = False,
) -> list[int] | None:
    """Where in ``queued`` (group ids, in queue order) the groups of a recorded step (``wanted``, in its
    order) are, in that order; None until every one of them is queued. A re-training run
    (``trainer.replay_batches_from``) takes its batches so, not as they happen to complete: the groups of
    a replayed range are all on the log at once, and a live run batched them as they arrived.
    ReplayDiverged if one of them is ``decided`` but not queued: the re-training dropped it, and would
    wait for it forever (the drop is the difference it was run to find). With ``rejudge`` (a retrain whose
    groups are decided again under its own rules) such a group is left out of the step instead: the step
    takes the others, or none (an empty list) when every one of them was dropped."""
    at = {group_id: i for i, group_id in enumerate(queued)}
    if not wanted:
        return None  # past the recorded run's last step
    if rejudge:
        wanted = [g for g in wanted if not (g in decided and g not in at)]
        return [at[g] for g in wanted] if all(g in at for g in wanted) else None
    if dropped := [g for g in wanted if g in decided and g not in at]:
        raise ReplayDiverged(
            f"re-training: the recorded step trained {', '.join(dropped)}, which this trainer dropped (its "
            "GroupDropped record says why)"
        )
    if not wanted or any(group_id not in at for group_id in wanted):
        return None
    return [at[group_id] for group_id in wanted]
