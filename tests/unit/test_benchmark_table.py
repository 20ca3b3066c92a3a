"""The MiniWoB++ benchmark table: each policy's success per task side by side with its Wilson interval, '—'
where a policy was not measured, the means over the literature's subsets (the teacher's also over all
the subset's tasks, the ones it does not play counted as failures), runs of one policy merged, and
``eval table`` building it from saved results without running anything; the blind baseline's fixed
click is the point hit on the most layouts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from cua_stream.app.evaluate.benchmark_table import load_runs, markdown
from cua_stream.evaluation import results as files
from cua_stream.evaluation.benchmark import rows, subset_mean
from cua_stream.evaluation.results import EvalEpisode, EvalResults
from cua_stream.tasks.miniwob.blind import best_point
from cua_stream.tasks.miniwob.literature import PIX2ACT_59, SUBSETS, WEBGUM_56


def run(policy: str, outcomes: dict[str, list[float]], run_id: str = "") -> EvalResults:
    episodes = [
        EvalEpisode(
            episode_id=f"{policy}-{task}-{i}", task=task, seed=i, sample=0, verdict="reward", reward=r
        )
        for task, rewards in outcomes.items()
        for i, r in enumerate(rewards)
    ]
    return EvalResults(run_id=run_id or f"eval-{policy}", policy=policy, environment="local-desktop", samples=1,
                       seeds=list(range(max(len(v) for v in outcomes.values()))), tasks=list(outcomes),
                       created_at=0.0, episodes=episodes)  # fmt: skip


def test_each_policy_has_its_cell_per_task_and_none_where_not_measured() -> None:
    runs = {"oracle": run("oracle", {"miniwob/click-test": [1, 1, 1, 0]}),
            "idle": run("idle", {"miniwob/click-test": [0, 0], "miniwob/choose-date": [0, 0]})}  # fmt: skip
    table = rows(runs)
    assert [r.task for r in table] == ["miniwob/choose-date", "miniwob/click-test"]
    click = table[1].cells["oracle"]
    assert click is not None and (click.successes, click.scored) == (3, 4)
    assert click.interval.low < 0.75 < click.interval.high
    assert table[0].cells["oracle"] is None  # the teacher does not play choose-date
    text = markdown(runs, table)
    assert "| miniwob/choose-date | — | 0.00 (0/2) [0.00, 0.66] |" in text


def test_a_subset_mean_is_over_the_measured_tasks_and_over_all_of_them() -> None:
    runs = {"oracle": run("oracle", {"miniwob/click-test": [1, 1], "miniwob/click-button": [1, 0]})}
    m = subset_mean(rows(runs), "oracle", ["click-test", "click-button", "book-flight", "choose-list"],
                    "miniwob/")  # fmt: skip
    assert (m.tasks, m.measured) == (4, 2)
    assert m.mean == 0.75 and m.mean_all == 0.375
    assert m.pooled is not None and m.pooled.low < 0.75 < m.pooled.high
    none = subset_mean(rows(runs), "idle", ["click-test"], "miniwob/")
    assert none.measured == 0 and none.mean is None


def test_the_literatures_subsets_have_their_sizes() -> None:
    assert len(set(WEBGUM_56)) == 56 and len(set(PIX2ACT_59)) == 59
    assert set(SUBSETS) == {"WebGUM/WebN-T5 56", "Pix2Act 59"}


def test_two_files_of_one_policy_are_one_run(tmp_path: Path) -> None:
    files.save(tmp_path / "a.json", run("oracle", {"miniwob/click-test": [1]}, "eval-b1"))
    files.save(tmp_path / "b.json", run("oracle", {"miniwob/enter-text": [1, 0]}, "eval-b2"))
    files.save(tmp_path / "c.json", run("random", {"miniwob/click-test": [0]}))
    runs = load_runs([tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"])
    assert set(runs) == {"oracle", "random"}
    assert (
        runs["oracle"].tasks == ["miniwob/click-test", "miniwob/enter-text"]
        and len(runs["oracle"].episodes) == 3
    )


def test_eval_table_prints_and_saves_the_table_from_saved_results(tmp_path: Path) -> None:
    files.save(
        tmp_path / "t.json",
        run("oracle", {"miniwob/click-test": [1] * 20, "miniwob/enter-text": [1] * 19 + [0]}),
    )
    files.save(
        tmp_path / "r.json", run("random", {"miniwob/click-test": [0] * 5, "miniwob/enter-text": [0] * 5})
    )
    done = subprocess.run(
        [sys.executable, "-m", "cua_stream", "eval", "table", str(tmp_path / "t.json"),
         str(tmp_path / "r.json"), "--out", str(tmp_path / "bench.json")],
        capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "250"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "0.95 (19/20)" in done.stdout and "Pix2Act 59" in done.stdout and "96.2 %" in done.stdout
    saved = (tmp_path / "bench-table.md").read_text()
    assert "| miniwob/enter-text | 0.95 (19/20) [0.76, 0.99] | 0.00 (0/5) [0.00, 0.43] |" in saved
    assert (tmp_path / "bench-table.json").is_file()


def test_the_fixed_click_is_the_pixel_hit_on_the_most_layouts() -> None:
    a = np.zeros((4, 5), dtype=bool)
    b = np.zeros((4, 5), dtype=bool)
    c = np.zeros((4, 5), dtype=bool)
    a[1:3, 1:4] = True
    b[2:4, 2:5] = True
    c[0, 0] = True
    assert best_point([a, b, c]) == (2, 2, 2)  # (x, y): the first of the pixels both a and b hold


def test_a_miniwob_task_set_with_no_policy_named_is_the_table() -> None:
    import pytest
    import typer

    from cua_stream.app.evaluate.benchmark_table import TABLE_POLICIES
    from cua_stream.cli.eval_options import scripted_policies
    from cua_stream.evaluation.plan import EvalPlan, eval_seeds
    from cua_stream.events import TaskRef

    def plan(*names: str) -> EvalPlan:
        return EvalPlan(tasks=tuple(TaskRef(name=n) for n in names), samples=1, seeds=tuple(eval_seeds(0, 1)))

    assert scripted_policies(plan("miniwob/click-test"), "", None, False) == list(TABLE_POLICIES)
    assert scripted_policies(plan("miniwob/click-test"), "idle, blind", None, False) == ["idle", "blind"]
    assert scripted_policies(plan("miniwob/click-test"), "", Path("/m"), False) == []  # a model
    with pytest.raises(typer.BadParameter, match="give a scripted policy"):
        scripted_policies(plan("click-box", "miniwob/click-test"), "", None, False)
