"""The scorer's transactional stage: one ScoreEvent per episode_id, counted per reason.

Exactly-once has two halves. The bus's transaction makes each poll's scores and consumed offsets
visible together, so a crash never leaves a score without its offset or an offset without its score.
This transform adds the other half: the outcome topic itself may hold an episode twice (a producer
retrying after a lost ack, a replay), so it remembers which episode_ids already have a committed score.

That memory is rebuilt, never trusted across failures: ``restore`` (on every assignment and after every
abort) re-reads every partition of the score topic with read_committed, so the scores that count are
exactly the committed ones (an aborted transaction's scores are invisible, and their outcomes are
consumed again).

The memory is one set of episode ids, not one per partition, and the restore reads all score partitions
rather than those numbered like the assigned outcome partitions: so the guarantee does not depend on how
the outcome's producer partitioned it. A producer with another partitioner (librdkafka hashes keys with
crc32), another key or no key puts an outcome on a partition other than its group's; its score still
goes to the group's partition (``partition_of``, where the group's turns are, for the trainer's join),
and a duplicate of it is still recognised after any restore. Such outcomes are counted as misrouted.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import AsyncIterator, Callable, Sequence

from cua_stream.bus.codec import Delivery
from cua_stream.events import Discard, OutcomeEvent, ScoreEvent
from cua_stream.metrics import Registry
from cua_stream.scoring import DEFAULT_CHOICE, RewardChoice, classify
from cua_stream.topics import SCORES, TopicSpec, partition_of

ReadScores = Callable[[], AsyncIterator[Delivery]]
"""Committed records of every partition of the score topic, from the beginning to the current end."""


class ScorerMetrics:
    """The scorer's Prometheus families; the transform adds to them only what has been committed."""

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or Registry()
        r = self.registry
        self.verdicts = r.counter(
            "cua_scorer_verdicts_total",
            "Scores committed, by verdict and reason.",
            ("verdict", "reason", "rule"),
        )
        self.duplicates = r.counter(
            "cua_scorer_duplicate_outcomes_total", "Outcomes skipped: their episode already had a score."
        )
        self.known_episodes = r.gauge("cua_scorer_known_episodes", "Scored episode_ids held for dedup.")
        self.misrouted = r.counter(
            "cua_scorer_misrouted_outcomes_total",
            "Outcomes found off their group's partition (another partitioner, key or none); scored all the same.",
        )
        self.restores = r.counter("cua_scorer_restores_total", "Dedup-state rebuilds from the score topic.")


class ScoreTransform:
    """``apply``: an outcome → its ScoreEvent (or nothing, for an episode already scored)."""

    def __init__(
        self,
        read_scores: ReadScores,
        *,
        choice: RewardChoice = DEFAULT_CHOICE,
        metrics: ScorerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        partitions: int | None = None,
    ) -> None:
        self._read_scores = read_scores
        self.choice = choice
        self.metrics = metrics or ScorerMetrics()
        self._clock = clock
        self._partitions = partitions
        """Partitions of the episode topics (to spot misrouted outcomes); None: not checked."""
        self._scored: set[str] = set()
        # Staged by apply, published by committed(), dropped by restore() (the batch was aborted).
        self._staged: Tally[tuple[str, str, str]] = Tally()
        self._staged_duplicates = 0
        self._staged_misrouted = 0

    def apply(self, delivery: Delivery) -> Sequence[tuple[TopicSpec, ScoreEvent]]:
        outcome = delivery.event
        if not isinstance(outcome, OutcomeEvent):  # the processor reads one topic of OutcomeEvents
            raise TypeError(f"scorer got {type(outcome).__name__}, expected OutcomeEvent")
        if self._partitions and delivery.partition != partition_of(
            outcome.group_id.encode(), self._partitions
        ):
            self._staged_misrouted += 1
        if outcome.episode_id in self._scored:
            self._staged_duplicates += 1
            return []
        row, verdict = classify(outcome, self.choice)
        self._scored.add(outcome.episode_id)
        kind = "discard" if isinstance(verdict, Discard) else "reward"
        self._staged[(kind, verdict.reason, row.name)] += 1
        score = ScoreEvent(
            run_id=outcome.run_id,
            group_id=outcome.group_id,
            episode_id=outcome.episode_id,
            attempt=outcome.attempt,
            verdict=verdict,
            policy_version=outcome.policy_version,
            scored_at=self._clock(),
        )
        return [(SCORES, score)]

    def committed(self) -> None:
        for (kind, reason, rule), n in self._staged.items():
            self.metrics.verdicts.inc(n, verdict=kind, reason=reason, rule=rule)
        self.metrics.duplicates.inc(self._staged_duplicates)
        self.metrics.misrouted.inc(self._staged_misrouted)
        self._staged.clear()
        self._staged_duplicates = self._staged_misrouted = 0
        self.metrics.known_episodes.set(len(self._scored))

    async def restore(self, partitions: frozenset[int]) -> None:
        """Rebuild the dedup memory from every committed score (``partitions``, the assigned outcome
        partitions, do not narrow it: see the module docstring)."""
        self._scored = {d.event.episode_id async for d in self._read_scores()}
        self._staged.clear()
        self._staged_duplicates = self._staged_misrouted = 0
        self.metrics.restores.inc()
        self.metrics.known_episodes.set(len(self._scored))

    def is_scored(self, episode_id: str) -> bool:
        return episode_id in self._scored
