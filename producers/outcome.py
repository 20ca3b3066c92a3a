"""An episode's OutcomeEvent from Harbor's TrialResult: a transcription of facts, no decisions.

The scorer decides (cua_stream/scoring.py); this module only records what happened:

- ``exception``: Harbor's ``exception_info`` (the first exception the trial recorded), with the phase it
  escaped in and the module that defines its class. Harbor keeps only the class name; the module comes
  from the last line of the recorded traceback (``mod.Class: message``; a builtin prints no module).
- the phase: the last of environment_setup / agent_setup / agent_execution / verifier that had started
  when the exception was recorded. Harbor records an agent failure before the verifier runs, and a
  verifier failure after ``verifier.started_at``, so ``occurred_at`` places each in its phase.
- ``agent_started``: ``agent_execution.started_at`` is set.
- ``rewards``: ``verifier_result.rewards``; ``early_termination_reason``: computer-1's metadata.
- ``n_calls`` and ``gateway_statuses`` come from the session gateway, which saw every LLM call.

``exception_from`` records an exception object the same way, for an episode driven without a Harbor
trial (the embedded demo's driver): one way to make an outcome's exception, whoever ran the episode.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cua_stream.events import ExceptionRecord, OutcomeEvent, Phase, WorkRequest
from cua_stream.identity import outcome_of

if TYPE_CHECKING:
    from harbor.models.trial.result import ExceptionInfo, TimingInfo, TrialResult

_TRACEBACK_HEAD = "Traceback (most recent call last):"
_RUNTIME_STATUS = re.compile(r"failed \((-?\d+)\)")
"""RuntimeRequestError's message: ``Runtime action 'x' failed (<status>): <detail>``."""


def outcome_from_trial(
    result: TrialResult,
    work: WorkRequest,
    attempt: int = 0,
    *,
    n_calls: int = 0,
    n_turns: int | None = None,
    gateway_statuses: Iterable[int] = (),
) -> OutcomeEvent:
    """The OutcomeEvent of ``attempt`` of ``work``, a finished trial (the task named as Harbor names it).
    ``n_turns`` defaults to computer-1's ``n_episodes``."""
    metadata = (result.agent_result.metadata if result.agent_result else None) or {}
    rewards = result.verifier_result.rewards if result.verifier_result else None
    return outcome_of(
        work,
        attempt,
        task=result.task_name,
        agent_started=_started(result.agent_execution),
        exception=exception_record(result),
        rewards={k: float(v) for k, v in rewards.items()} if rewards is not None else None,
        early_termination_reason=metadata.get("early_termination_reason"),
        n_calls=n_calls,
        n_turns=n_turns if n_turns is not None else int(metadata.get("n_episodes") or 0),
        gateway_statuses=tuple(gateway_statuses),
        trial_name=result.trial_name,
        started_at=_epoch(result.started_at),
        finished_at=_epoch(result.finished_at),
    )


def exception_from(error: BaseException, phase: Phase) -> ExceptionRecord:
    """The ExceptionRecord of an exception object, as ``exception_record`` reads it off a TrialResult
    (type name, message, defining module, a RuntimeRequestError's status)."""
    module = type(error).__module__
    message = str(error)
    return ExceptionRecord(
        type=type(error).__name__,
        message=message,
        phase=phase,
        module="builtins" if module == "builtins" else module,
        status_code=_status_in(type(error).__name__, message),
    )


def exception_record(result: TrialResult) -> ExceptionRecord | None:
    """The trial's exception as the scorer needs it, or None for a clean trial."""
    info = result.exception_info
    if info is None:
        return None
    return ExceptionRecord(
        type=info.exception_type,
        message=info.exception_message,
        phase=phase_of(result, info.occurred_at),
        module=module_of(info),
        status_code=_status_in(info.exception_type, info.exception_message),
    )


def phase_of(result: TrialResult, at: datetime) -> Phase:
    """The last phase that had started by ``at`` (environment if none had: a failure before it)."""
    phases = (
        (Phase.ENVIRONMENT, result.environment_setup),
        (Phase.AGENT_SETUP, result.agent_setup),
        (Phase.AGENT, result.agent_execution),
        (Phase.VERIFIER, result.verifier),
    )
    found = Phase.ENVIRONMENT
    for phase, timing in phases:
        if timing is not None and timing.started_at is not None and _utc(timing.started_at) <= _utc(at):
            found = phase
    return found


def module_of(info: ExceptionInfo) -> str:
    """The module of the exception's class, read off the traceback's exception line ("" if absent).

    The line after the last traceback block's frames reads ``pkg.mod.Class: message``; a builtin
    exception prints no module, which is recorded as ``builtins``.
    """
    text = info.exception_traceback
    head = text.rfind(_TRACEBACK_HEAD)
    if head < 0:
        return ""
    for line in text[head + len(_TRACEBACK_HEAD) :].splitlines():
        if not line or line[0].isspace():
            continue  # frames, source lines and carets are indented
        name = line.split(":", 1)[0].strip()
        if name == info.exception_type:
            return "builtins"
        if name.endswith("." + info.exception_type):
            return name[: -len(info.exception_type) - 1]
        return ""
    return ""


def _status_in(exception_type: str, message: str) -> int | None:
    if exception_type == "RuntimeRequestError":
        m = _RUNTIME_STATUS.search(message)
        return int(m.group(1)) if m else None
    return None


def _started(timing: TimingInfo | None) -> bool:
    return timing is not None and timing.started_at is not None


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _epoch(at: datetime | None) -> float:
    return _utc(at).timestamp() if at is not None else 0.0
