"""An evaluation's record for the ``evals`` topic (``EvalReport``): its results file summed up per task
and overall, as the table prints them. Pure."""

from __future__ import annotations

from cua_stream.evaluation.results import EvalResults
from cua_stream.evaluation.stats import Summary, by_task
from cua_stream.events import EvalReport, EvalTask, PolicyVersion


def report_of(
    results: EvalResults,
    *,
    success_at: float = 1.0,
    version: PolicyVersion | None = None,
) -> EvalReport:
    """The report of ``results``; of a training run's published ``version`` when one was evaluated."""
    return EvalReport(
        run_id=results.run_id,
        policy=results.policy,
        policy_version=version.version if version else None,
        of_run=version.run_id if version else "",
        version_published_at=version.published_at if version else None,
        environment=results.environment,
        samples=results.samples,
        success_at=success_at,
        layouts=len(results.seeds),
        tasks=tuple(task_of(name, s) for name, s in by_task(results.episodes, success_at).items()),
        created_at=results.created_at,
    )


def task_of(name: str, s: Summary) -> EvalTask:
    return EvalTask(
        task=name,
        episodes=s.episodes,
        scored=s.scored,
        successes=s.successes,
        low=s.interval.low,
        high=s.interval.high,
        pass_at=dict(s.pass_at),
        mean_reward=s.mean_reward,
        discards=dict(s.discards),
        unscored=s.unscored,
        mean_turns=s.mean_turns,
        mean_seconds=s.mean_seconds,
    )
