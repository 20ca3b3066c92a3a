"""Following a training run: which version is evaluated next, and which are done."""

from __future__ import annotations

from cua_stream.evaluation.follow import FollowMetrics, due, evaluated_versions, version_run, waiting_line
from cua_stream.events import EvalReport, PolicyVersion


def published(*versions: int) -> list[PolicyVersion]:
    return [
        PolicyVersion(
            run_id="run-1", version=v, weights_path=f"/ck/weights-v{v}", step=v, published_at=float(v)
        )
        for v in versions
    ]


def test_the_newest_due_version_is_taken_and_older_ones_skipped() -> None:
    assert due([], set(), 1) is None
    assert due(published(1), set(), 1).version == 1  # type: ignore[union-attr]
    assert due(published(1, 2, 3), {1}, 1).version == 3  # type: ignore[union-attr]  # 2 skipped: behind
    assert due(published(1, 2, 3), {3}, 1) is None
    assert due(published(1, 2, 3, 4, 5), set(), 2).version == 4  # type: ignore[union-attr]  # every 2nd
    assert due(published(1, 3, 5), set(), 2) is None
    assert due(list(reversed(published(4, 6))), {4}, 2).version == 6  # type: ignore[union-attr]  # any order


def test_done_versions_are_this_evaluations_reports_of_that_run() -> None:
    def report(run_id: str, of_run: str, version: int | None) -> EvalReport:
        return EvalReport(run_id=run_id, policy="m", policy_version=version, of_run=of_run, environment="scripted",
                          samples=1, success_at=1.0, layouts=1, tasks=(), created_at=0.0)  # fmt: skip

    reports = [
        report(version_run("eval-a", 2), "run-1", 2),
        report(version_run("eval-a", 4), "run-1", 4),
        report(version_run("eval-b", 6), "run-1", 6),  # another evaluation (other tasks, say)
        report(version_run("eval-a", 8), "run-2", 8),  # another run
        report("eval-a", "", None),  # a model directory's
    ]
    assert evaluated_versions(reports, "eval-a", "run-1") == {2, 4}


def test_the_metrics_say_how_far_behind_the_run_the_evaluation_is() -> None:
    metrics = FollowMetrics("run-1")
    metrics.seen(published(1, 2, 3), {1})  # an earlier start evaluated v1
    page = metrics.render()
    assert 'cua_eval_published_version{of_run="run-1"} 3' in page
    assert 'cua_eval_evaluated_version{of_run="run-1"} 1' in page
    assert "cua_eval_versions_total{" not in page  # none by this process yet
    v3 = published(3)[0]  # published at t=3, its report made at t=10.5: 7.5 s behind
    metrics.reported(EvalReport(run_id="eval-run-1-v3", policy="m", policy_version=3, of_run="run-1",
                                version_published_at=v3.published_at, environment="scripted", samples=1,
                                success_at=1.0, layouts=1, tasks=(), created_at=10.5))  # fmt: skip
    metrics.seen(published(1, 2), {1, 3})  # a scan that missed v3 does not move the published version back
    page = metrics.render()
    assert 'cua_eval_versions_total{of_run="run-1"} 1' in page
    assert 'cua_eval_lag_seconds{of_run="run-1"} 7.5' in page
    assert 'cua_eval_evaluated_version{of_run="run-1"} 3' in page
    assert 'cua_eval_published_version{of_run="run-1"} 3' in page


def test_waiting_says_for_which_version_of_which_run_on_which_topic() -> None:
    """Before: a follower of a run with no version (a mistyped id, another prefix) waited without a word
    on where it looked."""
    topic = "cua.policy"
    assert waiting_line("run-1", [], set(), 1, topic) == (
        "waiting for run run-1's first policy version on topic cua.policy (none there yet); Ctrl-C stops"
    )
    others = [
        PolicyVersion(run_id=r, version=1, weights_path="/w", step=1, published_at=1.0) for r in ("b", "a")
    ]
    assert "(runs with versions there: a, b)" in waiting_line("run-1", others, set(), 1, topic)
    assert waiting_line("run-1", published(1, 2), {2}, 1, topic) == (
        "waiting for run run-1's next policy version after v2 on topic cua.policy"
    )
    assert waiting_line("run-1", published(1, 2, 3), {2}, 2, topic).endswith(
        "after v3 on topic cua.policy, every 2"
    )
