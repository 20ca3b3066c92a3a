"""Real Harbor TrialResults for the scorer's tests.

Harbor's own models, with exceptions raised and then recorded the way a trial records them
(``ExceptionInfo.from_exception`` inside the ``except``), on Harbor's timeline: each phase's timing is
set when it starts, and an exception is recorded just after its phase's ``finished_at``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harbor.models.agent.context import AgentContext
from harbor.models.task.id import LocalTaskId
from harbor.models.trial.config import TaskConfig, TrialConfig
from harbor.models.trial.result import AgentInfo, ExceptionInfo, TimingInfo, TrialResult
from harbor.models.verifier.result import VerifierResult

from cua_stream.events import OutcomeEvent, Phase, TaskRef, WorkRequest
from producers.outcome import outcome_from_trial

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PHASES = (Phase.ENVIRONMENT, Phase.AGENT_SETUP, Phase.AGENT, Phase.VERIFIER)
TIMING_FIELD = {
    Phase.ENVIRONMENT: "environment_setup",
    Phase.AGENT_SETUP: "agent_setup",
    Phase.AGENT: "agent_execution",
    Phase.VERIFIER: "verifier",
}


def recorded(exc: BaseException) -> ExceptionInfo:
    """``exc`` raised and caught, then recorded as Harbor's Trial records it."""
    try:
        raise exc
    except BaseException as e:
        return ExceptionInfo.from_exception(e)


def phase_start(phase: Phase) -> datetime:
    return T0 + timedelta(seconds=10 * (PHASES.index(phase) + 1))


def trial_result(
    *,
    reached: Phase = Phase.VERIFIER,
    exc: BaseException | ExceptionInfo | None = None,
    failed_in: Phase | None = None,
    rewards: dict[str, float] | None = None,
    metadata: dict[str, Any] | None = None,
) -> TrialResult:
    """A single-step trial whose phases up to ``reached`` started; ``exc`` recorded in ``failed_in``
    (default: ``reached``). Harbor runs the verifier after a graded agent failure, so
    ``reached=VERIFIER, failed_in=AGENT`` is a real timeline."""
    timings: dict[str, TimingInfo] = {}
    for phase in PHASES[: PHASES.index(reached) + 1]:
        start = phase_start(phase)
        timings[TIMING_FIELD[phase]] = TimingInfo(started_at=start, finished_at=start + timedelta(seconds=8))
    info = None
    if exc is not None:
        info = exc if isinstance(exc, ExceptionInfo) else recorded(exc)
        at = phase_start(failed_in or reached) + timedelta(seconds=9)
        info = info.model_copy(update={"occurred_at": at})
    agent_started = "agent_execution" in timings
    task = Path("/tasks/open-settings")
    return TrialResult(
        task_name="open-settings",
        trial_name="open-settings__a1b2c3d",
        trial_uri="file:///trials/open-settings__a1b2c3d",
        task_id=LocalTaskId(path=task),
        task_checksum="0" * 64,
        config=TrialConfig(task=TaskConfig(path=task), trial_name="open-settings__a1b2c3d"),
        agent_info=AgentInfo(name="qwen3vl-computer-1", version="0.26.0"),
        agent_result=AgentContext(metadata=metadata or {"n_episodes": 4}) if agent_started else None,
        verifier_result=VerifierResult(rewards=rewards) if rewards is not None else None,
        exception_info=info,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=60),
        **timings,
    )


def outcome(result: TrialResult, **gateway: Any) -> OutcomeEvent:
    """The OutcomeEvent the producer would publish for ``result``."""
    return outcome_from_trial(result, work_of("run-1", "g-1", "ep-1", 3), **gateway)


def work_of(run_id: str, group_id: str, episode_id: str, policy_version: int) -> WorkRequest:
    """The work request an outcome's identity comes from."""
    return WorkRequest(
        run_id=run_id,
        group_id=group_id,
        episode_id=episode_id,
        task=TaskRef(name="t"),
        sample_index=0,
        group_size=1,
        policy_version=policy_version,
        created_at=0.0,
    )
