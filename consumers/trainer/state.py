"""What the trainer holds between polls: the groups queued for the next step, and what it decided since
its last checkpoint (published with the next one, so a restart neither loses nor repeats a record)."""

from __future__ import annotations

from dataclasses import dataclass, field

from consumers.trainer.episodes.samples import Sample, oldest_trained_version
from consumers.trainer.grpo.groups import GroupDecision
from consumers.trainer.grpo.stale_mask import newest_trained_version
from consumers.trainer.stream.join import GroupState
from cua_stream.events import DeadLetter, GroupDropped
from cua_stream.versions import too_stale


@dataclass
class Queued:
    """A group decided to train, waiting for its step."""

    group: GroupState
    decision: GroupDecision
    samples: dict[str, tuple[Sample, ...]]

    @property
    def trained_samples(self) -> list[Sample]:
        return [s for episode_id in self.decision.advantages for s in self.samples.get(episode_id, ())]

    @property
    def oldest_version(self) -> int | None:
        """The oldest weight version among the tokens it would train (None: no trained token has one)."""
        return oldest_trained_version(self.trained_samples)

    @property
    def newest_version(self) -> int | None:
        """The newest weight version among the tokens it would train (None: no trained token has one)."""
        return newest_trained_version(self.trained_samples)


def stale_in_queue(
    queue: list[Queued], version: int, bound: int | None, *, mask: bool = False
) -> tuple[list[Queued], list[tuple[Queued, str]]]:
    """The queue split into the groups still within the off-policy bound at ``version`` and the ones
    past it, each with why. A group is decided (the bound checked) when its last score arrives, but it
    may wait in the queue across a step for its own: by then the weights moved on one more version.
    With ``mask`` (``on_stale="mask"``) a group stays while any token it trains is within the bound (the
    step masks the others, ``stale_mask``); it is dropped only when every one of them is past it."""
    keep: list[Queued] = []
    stale: list[tuple[Queued, str]] = []
    for queued in queue:
        if mask and (newest := queued.newest_version) is not None and too_stale(version, newest, bound):
            why = (
                f"queued across a step: every trained token is stale, newest v{newest} < v{version} - {bound}"
            )
            stale.append((queued, why))
        elif not mask and (oldest := queued.oldest_version) is not None and too_stale(version, oldest, bound):
            stale.append((queued, f"queued across a step: oldest token v{oldest} < v{version} - {bound}"))
        else:
            keep.append(queued)
    return keep, stale


@dataclass
class TrainerState:
    version: int = 0
    step: int = 0
    weights: str = ""
    """The checkpoint directory's weights of ``version`` (empty: the start model)."""
    issued: int = 0
    queue: list[Queued] = field(default_factory=list)
    drops: list[GroupDropped] = field(default_factory=list)
    """Drops decided since the last checkpoint (published with it)."""
    dead_letters: list[DeadLetter] = field(default_factory=list)
    """The records at fault in the groups dropped as ``invalid_records`` since the last checkpoint
    (published with it, so a restart neither loses nor repeats one)."""
