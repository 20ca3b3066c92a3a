"""`learn`'s closing table (pure): the blind baseline (the best fixed click over a task's layouts), the
stage reports recognised among the evaluations, and the rows per task and stage."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from cua_stream.evaluation.plan import eval_seeds
from cua_stream.evaluation.report import report_of
from cua_stream.evaluation.results import EvalEpisode, EvalResults
from cua_stream.evaluation.stats import wilson
from cua_stream.events import EvalReport
from cua_stream.learn_table import (
    BLIND_ENVIRONMENT,
    blind_report,
    cell_text,
    rows_json,
    stage_of,
    stage_table,
)
from cua_stream.tasks.blind import best_fixed_click, target_box
from cua_stream.tasks.pages import layout


def covers(box: tuple[int, int, int, int], x: int, y: int) -> bool:
    bx, by, w, h = box
    return bx <= x < bx + w and by <= y < by + h


@pytest.mark.parametrize("task", ["click-test", "click-button", "click-box"])
def test_the_best_fixed_click_is_the_best_point_of_all(task: str) -> None:
    """Checked by brute force: the most boxes any point covers is reached at some box's left edge and some
    box's top edge, so trying every such pair finds the best count."""
    seeds = eval_seeds(0, 60)
    boxes = [target_box(layout(task, s)) for s in seeds]
    best = best_fixed_click(task, seeds)
    assert best is not None and best.layouts == 60
    assert best.hits == sum(covers(b, best.x, best.y) for b in boxes)  # the point it names hits that often
    brute = max(sum(covers(b, x, y) for b in boxes) for x, _, _, _ in boxes for _, y, _, _ in boxes)
    assert best.hits == brute


def test_click_test_falls_to_a_fixed_click_and_click_button_mostly_does_not() -> None:
    seeds = eval_seeds(0, 300)
    click_test, click_button = best_fixed_click("click-test", seeds), best_fixed_click("click-button", seeds)
    assert click_test is not None and click_test.hits == 300  # its button always covers the page's centre
    # 4 buttons in 15 cells, the target one of them: a blind click is right well under a quarter of the time
    assert click_button is not None and 0 < click_button.hits / 300 < 0.15
    # one box of 4 in 9 cells is the target: a blind click finds it about one time in nine
    click_box = best_fixed_click("click-box", seeds)
    assert click_box is not None and 0.08 < click_box.hits / 300 < 0.15


def test_no_single_click_solves_the_other_tasks() -> None:
    for task in ("fill-form", "read-value", "follow-link", "choose-option", "sign-up"):
        assert best_fixed_click(task, [1, 2, 3]) is None
    assert best_fixed_click("click-test", []) is None


def test_the_blind_report_per_task_and_overall_only_when_every_task_has_one() -> None:
    seeds = eval_seeds(0, 50)
    both = blind_report(["click-test", "click-button"], seeds, "eval-learn-x-blind", 5.0)
    assert (both.policy, both.environment, both.layouts, both.created_at) == (
        "blind",
        BLIND_ENVIRONMENT,
        50,
        5.0,
    )
    rows = {t.task: t for t in both.tasks}
    assert list(rows) == ["click-test", "click-button", "overall"]
    hits = best_fixed_click("click-button", seeds)
    assert hits is not None and rows["click-button"].successes == hits.hits
    assert rows["overall"].successes == 50 + hits.hits and rows["overall"].scored == 100
    i = wilson(hits.hits, 50)
    assert (rows["click-button"].low, rows["click-button"].high) == (i.low, i.high)
    some = blind_report(["click-test", "fill-form"], seeds, "eval-learn-x-blind", 5.0)
    assert [t.task for t in some.tasks] == ["click-test"]  # fill-form has none, so no overall either


def test_stage_of_finds_learns_columns_and_nothing_else() -> None:
    def named(run_id: str, policy: str) -> EvalReport:
        return EvalReport(run_id=run_id, policy=policy, environment="e", samples=1, success_at=1.0, layouts=1,
                          tasks=(), created_at=0.0)  # fmt: skip

    assert stage_of(named("eval-learn-20261203-s1-base", "base")) == ("learn-20261203-s1", "base")
    assert stage_of(named("eval-learn-1-blind", "blind")) == ("learn-1", "blind")
    assert stage_of(named("eval-learn-1-sft-e2", "sft-e2")) is None  # an SFT probe
    assert stage_of(named("eval-20261203", "/models/base")) is None  # cua-stream eval of a model
    assert stage_of(named("eval-other-run", "grpo")) is None  # the name, not the run's
    assert stage_of(named("eval--grpo", "grpo")) is None  # no learn run in it
    assert stage_of(named("learn-1-base", "base")) is None  # not an evaluation's run id


def results(stage: str, rewards: dict[str, list[float | None]]) -> EvalResults:
    """An evaluation with these rewards per task (None: discarded, not the policy's doing)."""
    episodes = [
        EvalEpisode(episode_id=f"{stage}-{task}-{i}", task=task, seed=i, sample=0,
                    verdict="discard" if r is None else "reward", reward=r)
        for task, rs in rewards.items() for i, r in enumerate(rs)
    ]  # fmt: skip
    return EvalResults(run_id=f"eval-learn-1-{stage}", policy=stage, environment="local", samples=1,
                       seeds=[0, 1, 2, 3], tasks=list(rewards), created_at=1.0, episodes=episodes)  # fmt: skip


def test_the_table_has_a_row_per_task_a_column_per_stage_and_a_dash_where_a_stage_did_not_run() -> None:
    reports = {
        "base": report_of(results("base", {"click-test": [0.0] * 4, "fill-form": [0.0, 0.0, 0.0, None]})),
        "grpo": report_of(
            results("grpo", {"click-test": [1.0, 1.0, 0.0, 1.0], "fill-form": [1.0, 0.0, 0.0, 0.0]})
        ),
        "blind": blind_report(["click-test", "fill-form"], eval_seeds(0, 20), "eval-learn-1-blind", 0.0),
    }  # no SFT stage ran
    rows = stage_table(reports)
    assert [r.task for r in rows] == ["click-test", "fill-form", "overall"]
    click, form, overall = rows
    assert list(click.cells) == ["blind", "base", "sft", "grpo"]
    assert click.cells["sft"] is None and cell_text(click.cells["sft"]) == "—"
    assert cell_text(click.cells["blind"]) == "1.00 [0.84, 1.00] (20/20)"
    assert cell_text(click.cells["base"]) == "0.00 [0.00, 0.49] (0/4)"
    assert cell_text(click.cells["grpo"]) == "0.75 [0.30, 0.95] (3/4)"
    assert form.cells["blind"] is None  # no fixed click solves it
    assert cell_text(form.cells["base"]) == "0.00 [0.00, 0.56] (0/3)"  # the discard is not an episode counted
    # Wilson of 4/8 by hand: 0.5 -+ 1.96 / 1.48 * sqrt(0.25 / 8 + 3.84 / 256) = [0.215, 0.785]
    assert overall.cells["blind"] is None and cell_text(overall.cells["grpo"]) == "0.50 [0.22, 0.78] (4/8)"
    assert rows_json(rows)[0] == {
        "task": "click-test",
        "cells": {
            "blind": {"rate": 1.0, "successes": 20, "scored": 20, "low": pytest.approx(0.8389, abs=1e-4), "high": 1.0,
                      "text": "1.00 [0.84, 1.00] (20/20)"},
            "base": {"rate": 0.0, "successes": 0, "scored": 4, "low": 0.0, "high": pytest.approx(0.4899, abs=1e-4),
                     "text": "0.00 [0.00, 0.49] (0/4)"},
            "sft": None,
            "grpo": {"rate": 0.75, "successes": 3, "scored": 4, "low": pytest.approx(0.3006, abs=1e-4),
                     "high": pytest.approx(0.9544, abs=1e-4), "text": "0.75 [0.30, 0.95] (3/4)"},
        },
    }  # fmt: skip


def test_a_stage_with_nothing_scored_shows_a_dash_and_the_cli_prints_every_column() -> None:
    from cua_stream.app.learn.report import stages_table

    reports = {"base": report_of(results("base", {"click-test": [None, None]}))}
    (row, _) = rows = stage_table(reports)
    assert row.cells["base"] is not None and cell_text(row.cells["base"]) == "—"
    console = Console(file=io.StringIO(), width=200)
    console.print(stages_table(rows, "run learn-1"))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "blind baseline" in text and "after SFT" in text and "after GRPO" in text
    assert text.count("—") == 8  # every cell of the two rows
