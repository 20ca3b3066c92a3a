"""Admission control: work already too stale is not run; its reason-coded outcome is scored a discard."""

from __future__ import annotations

from cua_stream.events import Discard, DiscardReason, TaskRef, WorkRequest
from cua_stream.scoring import classify
from producers.admission import admission, not_run_outcome


def work(version: int) -> WorkRequest:
    return WorkRequest(
        run_id="r", group_id="g", episode_id="e", task=TaskRef(name="t"), sample_index=0, group_size=2,
        policy_version=version, created_at=0.0,
    )  # fmt: skip


def test_work_older_than_the_bound_is_refused_and_scored_a_stale_discard() -> None:
    assert admission(work(8), latest_version=10, max_staleness=2) is None
    assert admission(work(7), latest_version=10, max_staleness=2) is DiscardReason.STALE
    assert admission(work(0), latest_version=99, max_staleness=None) is None
    outcome = not_run_outcome(work(7), DiscardReason.STALE, attempt=0, now=5.0)
    assert outcome.early_termination_reason == "not_run:stale" and not outcome.agent_started
    row, verdict = classify(outcome)
    assert row.name == "not_run" and verdict == Discard(reason="stale")
