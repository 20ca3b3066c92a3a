"""Joining one run's turns, summaries and scores into GRPO groups. Pure: the daemon feeds it records and
consumer positions; it says which groups are ready, and from which offsets a restart must read.

Episode topics are co-partitioned by ``group_id``, so a group's calls and scores sit on the same partition
number of each topic, and the join needs no shuffle. Memory holds only the open groups (images stay
references); a decided group is forgotten.

**When a group is ready.** Its ``group_size`` episodes all have a score. That is not yet enough: the
scores topic may be read ahead of the turns topic. But every call of an episode was made durable before
its outcome was produced, and the outcome before its score; so when the last score is seen, the call
topics' current end offsets (``barrier``) lie past every call of the group. The group is ready once the
consumer's positions on those partitions reach the barrier.

**Resuming.** ``resume_offsets`` gives, per input partition, the first offset a restarted trainer must
read again: the earliest record of a group still open, else the current position. Replaying from there
rebuilds the open groups exactly; groups already decided (kept in the checkpoint) are skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from cua_stream.bus.codec import Delivery
from cua_stream.events import CallRecord, ScoreEvent

TopicPartition = tuple[str, int]
"""(topic name, partition)."""
Coordinates = tuple[str, int, int]
"""(topic name, partition, offset) of a record: where to read it again (to dead-letter it)."""


@dataclass
class EpisodeState:
    calls: list[CallRecord] = field(default_factory=list)
    score: ScoreEvent | None = None
    where: dict[str, Coordinates] = field(default_factory=dict)
    """Each call's record, by call id."""
    score_at: Coordinates | None = None


@dataclass
class GroupState:
    group_id: str
    partition: int
    opened_at: float
    episodes: dict[str, EpisodeState] = field(default_factory=dict)
    first_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    barrier: dict[TopicPartition, int] | None = None
    """End offsets of the call topics' partitions when the group's last score was seen."""

    @property
    def scored(self) -> int:
        return sum(1 for e in self.episodes.values() if e.score is not None)


class Join:
    def __init__(
        self,
        run_id: str,
        group_size: int,
        call_topics: Iterable[str],
        decided: Iterable[str] = (),
        only: Collection[str] | None = None,
    ) -> None:
        self.run_id = run_id
        self.only = only
        """A re-training's groups (those of the recorded steps it trains): the others are skipped."""
        self.group_size = group_size
        self.call_topics = tuple(call_topics)
        self.decided: set[str] = set(decided)
        """Groups trained or dropped (from the checkpoint and since): their records are skipped."""
        self.groups: dict[str, GroupState] = {}
        self._complete: dict[str, GroupState] = {}
        """Groups with every score in (and so a barrier): only these can be ready."""

    def add(self, delivery: Delivery, now: float) -> GroupState | None:
        """Take one record; returns its group when that group just got its last score (it then needs a
        barrier from the daemon)."""
        event = delivery.event
        if not isinstance(event, (CallRecord, ScoreEvent)) or event.run_id != self.run_id:
            return None
        if event.group_id in self.decided or (self.only is not None and event.group_id not in self.only):
            return None
        group = self.expect(event.group_id, now)
        group.partition = delivery.partition
        group.first_offsets.setdefault((delivery.topic, delivery.partition), delivery.offset)
        episode = group.episodes.setdefault(event.episode_id, EpisodeState())
        if isinstance(event, ScoreEvent):
            if episode.score is not None:
                return None  # the scorer scores an episode once; a replayed duplicate changes nothing
            episode.score = event
            episode.score_at = (delivery.topic, delivery.partition, delivery.offset)
            if group.scored == self.group_size and group.barrier is None:
                self._complete[group.group_id] = group
                return group
            return None
        if event.call_id not in episode.where:  # at-least-once delivery: dedup
            episode.calls.append(event)
            episode.where[event.call_id] = (delivery.topic, delivery.partition, delivery.offset)
        return None

    def expect(self, group_id: str, now: float) -> GroupState:
        """The group's state, opened now if new (the feeder opens the groups it issues, so a group none
        of whose episodes ever reports still times out)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupState(group_id, -1, now)
        return group

    def call_partitions(self, group: GroupState) -> list[TopicPartition]:
        """The partitions the group's calls are on (its barrier's keys)."""
        return [(topic, group.partition) for topic in self.call_topics]

    def ready(self, positions: Mapping[TopicPartition, int]) -> list[GroupState]:
        """Groups whose barrier the consumer has reached, oldest first."""
        out = [
            g
            for g in self._complete.values()
            if g.barrier is not None and all(positions.get(tp, 0) >= end for tp, end in g.barrier.items())
        ]
        return sorted(out, key=lambda g: g.opened_at)

    def timed_out(self, now: float, timeout_s: float) -> list[GroupState]:
        """Open groups older than ``timeout_s`` that are not complete."""
        return [g for g in self.groups.values() if g.barrier is None and now - g.opened_at > timeout_s]

    def close(self, group_id: str) -> None:
        """The group is decided (trained or dropped): forget it, and skip its records from now on."""
        self.groups.pop(group_id, None)
        self._complete.pop(group_id, None)
        self.decided.add(group_id)

    def resume_offsets(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per input partition, where a restart reads from: the first record of a still-open group, else
        the current position."""
        out = dict(positions)
        for group in self.groups.values():
            for tp, offset in group.first_offsets.items():
                out[tp] = min(out.get(tp, offset), offset)
        return out
