"""Admission control: a producer does not run work the trainer could not train. Pure.

The trainer drops a group whose oldest token lags its policy version by more than ``max_staleness``;
work issued under a version already that old when a producer takes it would be run for nothing. It gets
an outcome instead, reason-coded ``not_run:stale``, which the scorer turns into a ``stale`` discard: the
work request still ends with exactly one outcome, and the drop is counted and visible.
"""

from __future__ import annotations

from cua_stream.events import NOT_RUN, DiscardReason, OutcomeEvent, WorkRequest
from cua_stream.identity import outcome_of
from cua_stream.versions import too_stale


def admission(work: WorkRequest, *, latest_version: int, max_staleness: int | None) -> DiscardReason | None:
    """None to run ``work``, else why not (its version lags ``latest_version`` by more than allowed)."""
    if too_stale(latest_version, work.policy_version, max_staleness):
        return DiscardReason.STALE
    return None


def not_run_outcome(work: WorkRequest, reason: DiscardReason, *, attempt: int, now: float) -> OutcomeEvent:
    """The outcome of work refused at admission (no trial, no calls)."""
    return outcome_of(
        work,
        attempt,
        agent_started=False,
        early_termination_reason=f"{NOT_RUN}{reason.value}",
        started_at=now,
        finished_at=now,
    )
