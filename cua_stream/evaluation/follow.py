"""Which of a training run's published versions an evaluation that follows the run takes next, and how
far behind the run it is (its metrics). Pure."""

from __future__ import annotations

from collections.abc import Iterable

from cua_stream.events import EvalReport, PolicyVersion
from cua_stream.metrics import Registry


def due(published: Iterable[PolicyVersion], evaluated: set[int], every: int) -> PolicyVersion | None:
    """The newest published version that is a multiple of ``every`` and newer than every version already
    evaluated; None while there is none. An evaluation slower than training skips to the newest such
    version: its lag behind training stays bounded instead of growing with every step."""
    newest_done = max(evaluated, default=0)
    eligible = [p for p in published if p.version % every == 0 and p.version > newest_done]
    return max(eligible, key=lambda p: p.version, default=None)


def waiting_line(of_run: str, published: Iterable[PolicyVersion], evaluated: set[int], every: int,
                 topic: str) -> str:  # fmt: skip
    """What an evaluation that follows ``of_run`` says while no version is due: which version it waits
    for and on which topic, and for a run with no version there, the runs that have some (a mistyped run
    id or a wrong topic prefix would otherwise wait in silence)."""
    mine = [p.version for p in published if p.run_id == of_run]
    if not mine:
        others = sorted({p.run_id for p in published})
        there = f"runs with versions there: {', '.join(others[:5])}" if others else "none there yet"
        return f"waiting for run {of_run}'s first policy version on topic {topic} ({there}); Ctrl-C stops"
    after = max(max(evaluated, default=0), max(mine))
    step = f", every {every}" if every > 1 else ""
    return f"waiting for run {of_run}'s next policy version after v{after} on topic {topic}{step}"


def version_run(run_id: str, version: int) -> str:
    """The evaluation run id of one version (its episodes' ids derive from it: a resumed evaluation of
    that version issues the same ones)."""
    return f"{run_id}-v{version}"


def evaluated_versions(reports: Iterable[EvalReport], run_id: str, of_run: str) -> set[int]:
    """The versions of ``of_run`` this evaluation (``run_id``) has published results for."""
    return {
        r.policy_version
        for r in reports
        if r.of_run == of_run
        and r.policy_version is not None
        and r.run_id == version_run(run_id, r.policy_version)
    }


class FollowMetrics:
    """An evaluation that follows a run, as Prometheus metrics (``eval follow --metrics-port``): how
    far behind training it is, in seconds and in versions."""

    def __init__(self, of_run: str) -> None:
        self.of_run = of_run
        self.registry = Registry()
        self.versions = self.registry.counter(
            "cua_eval_versions_total", "Versions of the followed run this process evaluated.", ("of_run",)
        )
        self.lag = self.registry.gauge(
            "cua_eval_lag_seconds",
            "The last evaluated version's lag: its publication (PolicyVersion) to its eval report.",
            ("of_run",),
        )
        self.evaluated_version = self.registry.gauge(
            "cua_eval_evaluated_version", "The newest version of the followed run evaluated.", ("of_run",)
        )
        self.published_version = self.registry.gauge(
            "cua_eval_published_version", "The newest version the followed run has published.", ("of_run",)
        )

    def seen(self, published: Iterable[PolicyVersion], evaluated: set[int]) -> None:
        """What the run has published and what is evaluated (an earlier start's evaluations included)."""
        newest = max((p.version for p in published), default=0)
        self.published_version.set(max(newest, self.published_version.value(of_run=self.of_run)),
                                   of_run=self.of_run)  # fmt: skip
        self.evaluated_version.set(max(evaluated, default=0), of_run=self.of_run)

    def reported(self, report: EvalReport) -> None:
        """One version evaluated by this process and its report published."""
        self.versions.inc(of_run=self.of_run)
        if report.policy_version is not None:
            newest = max(report.policy_version, int(self.evaluated_version.value(of_run=self.of_run)))
            self.evaluated_version.set(newest, of_run=self.of_run)
        if report.version_published_at is not None:
            self.lag.set(max(0.0, report.created_at - report.version_published_at), of_run=self.of_run)

    def render(self) -> str:
        return self.registry.render()
