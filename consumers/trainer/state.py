"""What the trainer holds between polls: the groups queued for the next step, and what it decided since
its last checkpoint (published with the next one, so a restart neither loses nor repeats a record)."""

from __future__ import annotations

from dataclasses import dataclass, field

from consumers.trainer.grpo import GroupDecision
from consumers.trainer.join import GroupState
from consumers.trainer.samples import Sample
from cua_stream.events import DeadLetter, GroupDropped


@dataclass
class Queued:
    """A group decided to train, waiting for its step."""

    group: GroupState
    decision: GroupDecision
    samples: dict[str, tuple[Sample, ...]]


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
