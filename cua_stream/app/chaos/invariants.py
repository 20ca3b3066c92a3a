"""What a run must have kept, whatever failed during it: checked from the topics alone. Pure.

The records are read with ``read_committed`` after the run (aborted transactions are not there). Each
check returns how many things it looked at and the problems it found (none, for a run that kept its
promises); ``lost`` and ``duplicated`` sum up the two numbers a chaos run reports.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from cua_stream.events import (
    DeadLetter,
    Discard,
    GroupDropped,
    OutcomeEvent,
    PolicyVersion,
    Reward,
    ScoreEvent,
    TrainStep,
    WorkRequest,
)


@dataclass(frozen=True)
class RunLog:
    """One run's records (filtered by run id where records carry one)."""

    work: list[WorkRequest]
    outcomes: list[OutcomeEvent]
    scores: list[ScoreEvent]
    steps: list[TrainStep]
    drops: list[GroupDropped]
    policy: list[PolicyVersion]
    """In log order."""
    dead_letters: list[DeadLetter] = field(default_factory=list)
    undecodable: list[tuple[str, int, int]] = field(default_factory=list)
    """(topic, partition, offset) of every record that did not decode, on the topics the run reads."""
    secrets_scanned: int = 0
    """Records, files and metrics pages scanned for session keys."""
    secrets_found: list[str] = field(default_factory=list)
    """Where a session key was found."""
    exposure: list[str] | None = None
    """What the run found reachable beyond what it should be (listeners beyond loopback, admin routes
    open to non-admin callers); None: not probed."""


@dataclass(frozen=True)
class Check:
    name: str
    checked: int
    problems: tuple[str, ...]
    lost: int = 0
    duplicated: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def _check(name: str, checked: int, problems: list[str], *, lost: int = 0, duplicated: int = 0) -> Check:
    return Check(name, checked, tuple(problems), lost, duplicated)


def work_answered(log: RunLog) -> Check:
    """Every work request ends with an outcome (a run, a failure, or a reason not to run)."""
    answered = {o.episode_id for o in log.outcomes}
    issued = {w.episode_id for w in log.work}
    lost = sorted(issued - answered)
    return _check(
        "every work request has an outcome", len(issued), [f"{e}: no outcome" for e in lost], lost=len(lost)
    )


def one_outcome_per_attempt(log: RunLog) -> Check:
    """A finished attempt publishes one outcome, however often its producer died around the publish."""
    counts = Counter((o.episode_id, o.attempt) for o in log.outcomes)
    dup = sorted(k for k, n in counts.items() if n > 1)
    return _check(
        "one outcome per finished attempt",
        len(counts),
        [f"{e} attempt {a}: {counts[(e, a)]} outcomes" for e, a in dup],
        duplicated=sum(counts[k] - 1 for k in dup),
    )


def one_score_per_episode(log: RunLog) -> Check:
    """Exactly one score per episode with an outcome, for one of that episode's attempts (the scorer
    scores an episode's first outcome; later attempts' outcomes are duplicates it counts and skips)."""
    attempts: dict[str, set[int]] = {}
    for o in log.outcomes:
        attempts.setdefault(o.episode_id, set()).add(o.attempt)
    counts = Counter(s.episode_id for s in log.scores)
    problems = [f"{e}: no score" for e in sorted(set(attempts) - set(counts))]
    problems += [f"{e}: {n} scores" for e, n in sorted(counts.items()) if n > 1]
    problems += [
        f"{s.episode_id}: scored attempt {s.attempt} has no outcome"
        for s in log.scores
        if s.attempt not in attempts.get(s.episode_id, set())
    ]
    return _check(
        "one score per answered episode",
        len(attempts),
        problems,
        lost=len(set(attempts) - set(counts)),
        duplicated=sum(n - 1 for n in counts.values() if n > 1),
    )


def groups_decided_once(log: RunLog, *, max_in_flight: int) -> Check:
    """Each issued group is trained once or dropped once (never both), and was issued whole; the groups
    neither trained nor dropped when the trainer stopped are at most its in-flight window (any of them: a
    group slowed by a killed producer may still be running while later ones finished); beyond it, the
    oldest undecided ones are lost."""
    trained = Counter(g for s in log.steps for g in s.group_ids)
    dropped = Counter(d.group_id for d in log.drops)
    order: dict[str, float] = {}
    sizes: dict[str, int] = {}
    indices: dict[str, set[int]] = {}
    for w in log.work:
        order[w.group_id] = min(order.get(w.group_id, w.created_at), w.created_at)
        sizes[w.group_id] = w.group_size
        indices.setdefault(w.group_id, set()).add(w.sample_index)
    issued = sorted(order, key=lambda g: (order[g], g))
    problems = [f"{g}: trained {n} times" for g, n in sorted(trained.items()) if n > 1]
    problems += [f"{g}: dropped {n} times" for g, n in sorted(dropped.items()) if n > 1]
    problems += [f"{g}: trained and dropped" for g in sorted(set(trained) & set(dropped))]
    problems += [f"{g}: decided but never issued" for g in sorted((set(trained) | set(dropped)) - set(order))]
    undecided = [g for g in issued if g not in trained and g not in dropped]
    lost = undecided[: max(0, len(undecided) - max_in_flight)]
    problems += [f"{g}: never trained nor dropped, beyond the in-flight window" for g in lost]
    short = [g for g in issued if len(indices[g]) < sizes[g] and g not in lost]
    problems += [f"{g}: issued {len(indices[g])} of its {sizes[g]} episodes" for g in short]
    lost += short
    duplicated = sum(n - 1 for n in trained.values()) + len(set(trained) & set(dropped))
    return _check(
        "every group trained once or dropped with a reason",
        len(issued),
        problems,
        lost=len(lost),
        duplicated=duplicated,
    )


def trained_attempts_finished(log: RunLog) -> Check:
    """What was trained is an attempt that finished: it has an outcome and its score is a reward (the
    turns of an attempt whose producer died, with no outcome, are never trained)."""
    finished = {(o.episode_id, o.attempt) for o in log.outcomes}
    rewarded = {(s.episode_id, s.attempt) for s in log.scores if isinstance(s.verdict, Reward)}
    trained = [(e, a) for s in log.steps for e, a in sorted(s.attempts.items())]
    problems = [f"{e} attempt {a}: trained without an outcome" for e, a in trained if (e, a) not in finished]
    problems += [
        f"{e} attempt {a}: trained without a reward score" for e, a in trained if (e, a) not in rewarded
    ]
    return _check("trained attempts have an outcome and a reward", len(trained), problems)


def trained_as_expected(log: RunLog) -> Check:
    """The trained episodes are exactly the rewarded episodes of the trained groups, each once."""
    trained_groups = {g for s in log.steps for g in s.group_ids}
    rewarded = {s.episode_id for s in log.scores if isinstance(s.verdict, Reward)}
    expected = {w.episode_id for w in log.work if w.group_id in trained_groups and w.episode_id in rewarded}
    counts = Counter(e for s in log.steps for e in s.attempts)
    problems = [f"{e}: expected, not trained" for e in sorted(expected - set(counts))]
    problems += [f"{e}: trained, not expected" for e in sorted(set(counts) - expected)]
    problems += [f"{e}: trained {n} times" for e, n in sorted(counts.items()) if n > 1]
    return _check(
        "trained episodes = the expected set",
        len(expected),
        problems,
        lost=len(expected - set(counts)),
        duplicated=sum(n - 1 for n in counts.values() if n > 1),
    )


def versions_increase(log: RunLog) -> Check:
    """Policy versions only go up, and steps count 1, 2, 3, ... with no gap or repeat."""
    problems = [
        f"policy v{b.version} after v{a.version}"
        for a, b in itertools.pairwise(log.policy)
        if b.version <= a.version
    ]
    steps = [s.step for s in log.steps]
    if sorted(steps) != list(range(1, len(steps) + 1)):
        problems.append(f"steps {sorted(steps)[:10]}... are not 1..{len(steps)} once each")
    return _check("policy versions only increase", len(log.policy), problems)


def undecodable_dead_lettered(log: RunLog) -> Check:
    """Every record that did not decode is on the dead-letter topic with a reason."""
    lettered = {(d.source_topic, d.partition, d.offset): d.reason for d in log.dead_letters}
    problems = [
        f"{t}[{p}]@{o}: not dead-lettered" for t, p, o in log.undecodable if (t, p, o) not in lettered
    ]
    problems += [
        f"{t}[{p}]@{o}: dead letter without a reason"
        for t, p, o in log.undecodable
        if lettered.get((t, p, o)) == ""
    ]
    return _check("undecodable records are dead-lettered", len(log.undecodable), problems, lost=len(problems))


def discards_reason_coded(log: RunLog) -> Check:
    """Every discard and every dropped group says why."""
    discards = [s for s in log.scores if isinstance(s.verdict, Discard)]
    problems = [f"{s.episode_id}: discard without a reason" for s in discards if not s.verdict.reason]
    problems += [f"{d.group_id}: dropped without a reason" for d in log.drops if not d.reason]
    return _check("every discard and drop has a reason", len(discards) + len(log.drops), problems)


def no_session_key_leaked(log: RunLog) -> Check:
    """No per-episode session key on any topic, in any daemon log, trial or checkpoint file, or on any
    metrics page: the key is the agent's alone."""
    return _check(
        "no session key in records, logs, files, metrics",
        log.secrets_scanned,
        [f"a session key in {where}" for where in log.secrets_found],
    )


def nothing_exposed(log: RunLog) -> Check:
    """The services listen on loopback only (their default) and their admin routes (drain, resume,
    weight loads, pauses) refuse callers without the admin key."""
    return _check("loopback only; admin routes need the admin key", 0 if log.exposure is None else 1,
                  list(log.exposure or []))  # fmt: skip


def check_all(log: RunLog, *, max_in_flight: int) -> list[Check]:
    return [
        work_answered(log),
        one_outcome_per_attempt(log),
        one_score_per_episode(log),
        groups_decided_once(log, max_in_flight=max_in_flight),
        trained_attempts_finished(log),
        trained_as_expected(log),
        versions_increase(log),
        undecodable_dead_lettered(log),
        discards_reason_coded(log),
        no_session_key_leaked(log),
        nothing_exposed(log),
    ]


def totals(checks: Iterable[Check]) -> tuple[int, int]:
    """(lost, duplicated) over the checks."""
    checks = list(checks)
    return sum(c.lost for c in checks), sum(c.duplicated for c in checks)
