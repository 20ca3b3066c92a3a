"""Admission control: a producer does not run work it must not run, or work the trainer could not train.

- A task is run only from the producer's task roots (the bundled tasks, its own export of the MiniWoB++
  suite, and the directories its operator lists in ``producer.task_roots``): a work record names a task directory by a path on the producer's
  host, and whoever may write work must not choose what that host runs (a task's environment, setup and
  verifier are commands). The path is resolved (``..`` and symlinks) before it is compared.
- The trainer drops a group whose oldest token lags its policy version by more than ``max_staleness``;
  work issued under a version already that old when a producer takes it would be run for nothing.

Refused work gets an outcome instead, reason-coded ``not_run:<reason>`` (``task_not_allowed``,
``stale``), which the scorer turns into a discard of that reason: the work request still ends with
exactly one outcome, and the refusal is counted and visible. Pure, but for resolving a task path's links.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cua_stream.events import NOT_RUN, DiscardReason, OutcomeEvent, TaskRef, WorkRequest
from cua_stream.identity import outcome_of
from cua_stream.versions import too_stale


def admission(
    work: WorkRequest, *, latest_version: int, max_staleness: int | None, task_roots: Sequence[Path]
) -> DiscardReason | None:
    """None to run ``work``, else why not: its task lies outside ``task_roots``, or its version lags
    ``latest_version`` by more than allowed."""
    if not task_allowed(work.task, task_roots):
        return DiscardReason.TASK_NOT_ALLOWED
    if too_stale(latest_version, work.policy_version, max_staleness):
        return DiscardReason.STALE
    return None


def task_allowed(task: TaskRef, roots: Sequence[Path]) -> bool:
    """Whether ``task`` runs from under one of ``roots`` (resolved directories). A task named without a
    path is a bundled or MiniWoB++ task by name (the runner resolves nothing else: the MiniWoB++ tasks
    from its own export of the installed package); a path must be absolute (a
    relative one would mean whatever the producer's working directory holds) and, with ``..`` and every
    symlink resolved, lie under a root."""
    if not task.path:
        return True
    if not os.path.isabs(task.path):
        return False
    return within(Path(os.path.realpath(task.path)), roots)


def within(path: Path, roots: Sequence[Path]) -> bool:
    """Whether resolved ``path`` is one of resolved ``roots`` or under one (by whole path components:
    ``/tasks-evil`` is not under ``/tasks``)."""
    return any(path.is_relative_to(root) for root in roots)


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
