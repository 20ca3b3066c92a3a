"""What the trainer reads, and one poll of it into the join.

The inputs are the run's turns, summaries and scores; the policy topic is read too, because its run's
records there (keyed by run id) are the trainer's own: one of them that does not decode is this trainer's
to dead-letter (every producer reads the topic too, and another run's trainer letters its own). A record
that does not decode never stalls the loop: it is dead-lettered once (not again when a restart re-reads
it below the checkpoint's ``read_to``) and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from consumers.trainer.stream.join import GroupState, Join
from cua_stream.bus.consumer import decode_message, letter_for
from cua_stream.bus.follow import Follower
from cua_stream.errors import RecordError
from cua_stream.events import DeadLetter
from cua_stream.topics import POLICY, SCORES, SUMMARIES, TURNS, Topics, TopicSpec

log = logging.getLogger(__name__)

INPUTS: tuple[TopicSpec, ...] = (TURNS, SUMMARIES, SCORES)
READS: tuple[TopicSpec, ...] = (*INPUTS, POLICY)
"""The inputs, and the policy topic (its run's records are the trainer's own)."""


@dataclass(frozen=True)
class Intake:
    by_name: dict[str, TopicSpec]
    policy_topic: str
    own_key: bytes
    lettered: dict[tuple[str, int], int]
    """Per partition, the offset below which the checkpoint's dead letters cover a bad record."""

    @classmethod
    def of(cls, topics: Topics, run_id: str, read_to: Iterable[tuple[str, int, int]]) -> Intake:
        return cls(
            by_name={topics.name_of(s): s for s in READS},
            policy_topic=topics.name_of(POLICY),
            own_key=run_id.encode(),
            lettered={(t, p): o for t, p, o in read_to},
        )

    async def poll(
        self, inputs: Follower, join: Join, clock: Callable[[], float], on_undecodable: Callable[[], object]
    ) -> list[DeadLetter]:
        """Read what arrived into ``join``, give the groups it completed their barriers, and return the
        dead letters of the records that did not decode."""
        completed: list[GroupState] = []
        letters: list[DeadLetter] = []
        for msg in await inputs.poll(0.2):
            try:
                delivery = decode_message(self.by_name, msg)
            except RecordError as e:
                if msg.topic == self.policy_topic and msg.key != self.own_key:
                    continue  # another run's (its trainer dead-letters it)
                on_undecodable()
                log.warning("skipping %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, e)
                if msg.offset >= self.lettered.get((msg.topic, msg.partition), 0):
                    letters.append(letter_for(e, msg))
                continue
            if (complete := join.add(delivery, clock())) is not None:
                completed.append(complete)
        await set_barriers(inputs, join, completed)
        return letters


async def set_barriers(inputs: Follower, join: Join, groups: list[GroupState]) -> None:
    """Give each group that just got its last score its barrier: the current end offsets of its call
    partitions, read in one request for all of them (a request per group would cost a round trip each)."""
    if not groups:
        return
    ends = await inputs.end_offsets({part for g in groups for part in join.call_partitions(g)})
    for group in groups:
        group.barrier = {tp: ends[tp] for tp in join.call_partitions(group)}
