"""Which of a training run's published versions an evaluation that follows the run takes next. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from cua_stream.events import EvalReport, PolicyVersion


def due(published: Iterable[PolicyVersion], evaluated: set[int], every: int) -> PolicyVersion | None:
    """The newest published version that is a multiple of ``every`` and newer than every version already
    evaluated; None while there is none. An evaluation slower than training skips to the newest such
    version: its lag behind training stays bounded instead of growing with every step."""
    newest_done = max(evaluated, default=0)
    eligible = [p for p in published if p.version % every == 0 and p.version > newest_done]
    return max(eligible, key=lambda p: p.version, default=None)


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
