"""Policy versions and staleness, in one place. Pure.

Every weight update the trainer publishes is the next version (``PolicyVersion.version``; 0 is the
start model), and every ``policy_version`` on a record counts in those versions. Which version a record
carries, it says in its own docstring: a work request the trainer's when it issued it; a call the
oldest of its completion tokens' (its spans give each token's); an outcome and its score their work
request's; a train step the version it produced (it trained from the one before: ``trained_from``); a
dropped group the trainer's when it dropped it.

Staleness is how many versions a rollout lags: ``staleness(latest, version)``. Admission (a producer
refusing old work), the group decision (the off-policy bound), the trainer's metrics and the dashboard
all count it with this one function.
"""

from __future__ import annotations


def staleness(latest: int, version: int) -> int:
    """How many versions ``version`` lags ``latest`` (0 when it does not)."""
    return max(0, latest - version)


def trained_from(produced: int) -> int:
    """The version whose weights a train step trained, given the version it produced (its
    ``policy_version``): the one before, since each step publishes the next version."""
    return produced - 1


def too_stale(latest: int, version: int, bound: int | None) -> bool:
    """Whether ``version`` lags ``latest`` by more than ``bound`` versions (None: no bound)."""
    return bound is not None and staleness(latest, version) > bound


MAX_VERSION = 2**31 - 1
"""The newest version a record may carry: the trainer holds each token's version as an int32 (a run would
need a step a second for 68 years to reach it). A version beyond it, or below 0, is not one the trainer
published: the record carrying it is dead-lettered (``consumers.trainer.episodes.checks``)."""


def is_version(version: int) -> bool:
    """Whether ``version`` is one a trainer can have published (0, the start model, to ``MAX_VERSION``)."""
    return 0 <= version <= MAX_VERSION
