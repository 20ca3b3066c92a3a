"""Who may do what on the bus: one Kafka principal per role, and the least-privilege ACLs of each role
under one topic prefix, derived from the topic registry (a pure function: ``acls(prefix)``).

What each role touches was read off the daemons, not guessed:

* ``trainer`` follows turns, summaries, scores and the policy topic (no consumer group: its checkpoint
  holds its offsets), scans work, train_steps and dlq again on a restart (``issued_in_log``,
  ``reconcile``), and writes work, policy, train_steps and dlq.
* ``producer`` consumes its lane's work topic in its lane's group (training's work or evaluation's
  eval_work), follows the policy topic (no group), and writes outcomes and dead letters.
* ``gateway`` writes turns and summaries; it reads nothing from Kafka.
* ``scorer`` consumes outcomes in its group, reads the scores again to rebuild its duplicate filter
  (on every assignment), and writes scores and dead letters in Kafka transactions (its transactional
  ids are ``<prefix>.scorer-<n>``: a prefixed grant).
* ``reader`` (dashboard, tap, replay's source) reads every topic of the prefix; none of them joins a
  group (``Follower`` and range reads assign partitions), so it gets no group, only Describe on the
  prefix's groups (lag, committed offsets).
* ``evaluator`` (``cua-stream eval``) issues its evaluation's work (``eval-`` runs) on eval_work, which
  only the eval lane's producers read, follows a training run's policy topic (``--follow``), reads its
  episodes' outcomes and scores (and eval_work again, to resume), and writes its results to evals. It
  has no grant on the work topic: whoever holds its password cannot write work a training producer
  plays, nor read training's work. Its episodes are played by
  producers and scored by the scorer under their own principals; ``eval``'s all-in-one mode (its own
  producer and scorer in the process, one bus config) needs their grants too: run it as admin, or run
  an eval-lane producer and the scorer as daemons.
* ``admin`` is the broker's super user (topic and ACL administration): it needs no ACL.

Read and Write imply Describe in Kafka, which covers the metadata look-ups every client makes (the
daemons' ``require_topics``); Write on a topic also covers an idempotent producer's producer id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cua_stream.topics import (
    DLQ,
    EVAL_WORK,
    EVALS,
    OUTCOMES,
    POLICY,
    SCORES,
    SUMMARIES,
    TRAIN_STEPS,
    TURNS,
    WORK,
    Topics,
    TopicSpec,
)

ADMIN = "admin"
ROLES: tuple[str, ...] = (ADMIN, "trainer", "producer", "gateway", "scorer", "reader", "evaluator")
"""Every principal the secured local broker creates (``User:<role>``); ``admin`` is its super user."""

Resource = Literal["topic", "group", "transactional_id"]
Pattern = Literal["literal", "prefixed"]
Operation = Literal["read", "write", "describe"]


@dataclass(frozen=True)
class Acl:
    role: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation
    allow: bool = True

    @property
    def principal(self) -> str:
        return f"User:{self.role}"


_WRITES: dict[str, tuple[TopicSpec, ...]] = {
    "trainer": (WORK, POLICY, TRAIN_STEPS, DLQ),
    "producer": (OUTCOMES, DLQ),
    "gateway": (TURNS, SUMMARIES),
    "scorer": (SCORES, DLQ),
    "evaluator": (EVAL_WORK, EVALS),
}
_READS: dict[str, tuple[TopicSpec, ...]] = {
    "trainer": (TURNS, SUMMARIES, SCORES, POLICY, WORK, TRAIN_STEPS, DLQ),
    "producer": (WORK, EVAL_WORK, POLICY),
    "scorer": (OUTCOMES, SCORES),
    "evaluator": (EVAL_WORK, POLICY, OUTCOMES, SCORES, EVALS),
}


def acls(prefix: str) -> list[Acl]:
    """Every ACL of every role for the topics under ``prefix`` (allow rules only: what is not granted
    is refused, since the broker runs with ``allow.everyone.if.no.acl.found=false``)."""
    topics = Topics(prefix=prefix)
    out: list[Acl] = []
    for role in ROLES[1:]:
        out += [Acl(role, "topic", topics.name_of(s), "literal", "read") for s in _READS.get(role, ())]
        out += [Acl(role, "topic", topics.name_of(s), "literal", "write") for s in _WRITES.get(role, ())]
    # The default group names of the producers' and scorer's configs (``ProducerConfig.group``,
    # ``ScorerConfig.group``): a deployment that renames a group grants it itself.
    out.append(Acl("producer", "group", f"{prefix}.producers", "literal", "read"))
    out.append(Acl("producer", "group", f"{prefix}.eval-producers", "literal", "read"))  # the eval lane
    out.append(Acl("scorer", "group", f"{prefix}.scorer", "literal", "read"))
    out.append(Acl("scorer", "transactional_id", f"{prefix}.scorer", "prefixed", "write"))
    out.append(Acl("reader", "topic", f"{prefix}.", "prefixed", "read"))
    out.append(Acl("reader", "group", f"{prefix}.", "prefixed", "describe"))
    return sorted(out, key=lambda a: ROLES.index(a.role))  # stable: each role's rules together


# Kafka's wire codes (org.apache.kafka.common.resource / acl enums) for CreateAcls.
RESOURCE_CODES: dict[Resource, int] = {"topic": 2, "group": 3, "transactional_id": 5}
PATTERN_CODES: dict[Pattern, int] = {"literal": 3, "prefixed": 4}
OPERATION_CODES: dict[Operation, int] = {"read": 3, "write": 4, "describe": 8}
ALLOW, DENY = 3, 2
