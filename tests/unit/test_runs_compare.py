"""Runs side by side (``consumers/trainer/retrain/compare.py``): the steps of each, what each run's settings
changed against the first's, a row per step and run, and a run with nothing to compare named in one error."""

from __future__ import annotations

import pytest

from consumers.trainer.retrain.compare import compare, document, header_lines, render, table
from consumers.trainer.retrain.rerun import RecordedRun
from cua_stream.errors import ConfigError
from cua_stream.events import TrainerSettings, TrainStep


def step(run: str, n: int, loss: float, retrain_of: str = "", **metrics: float) -> TrainStep:
    return TrainStep(
        run_id=run, step=n, policy_version=n, n_groups=1, n_episodes=2, n_samples=2, loss=loss,
        metrics=metrics, finished_at=0.0, retrain_of=retrain_of,
    )  # fmt: skip


def settings(run: str, retrain_of: str = "", **values: object) -> TrainerSettings:
    base = {"run_id": run, "lr": 0.01, "kl_coef": 0.0, "passes": 1, "checkpoint_dir": f"/ckpt/{run}"}
    return TrainerSettings(
        run_id=run, settings={**base, **values}, step=0, retrain_of=retrain_of, started_at=0
    )


def recorded(run: str, steps: list[TrainStep], records: list[TrainerSettings]) -> RecordedRun:
    return RecordedRun(run, {s.step: s for s in steps}, records, "cua.train_steps")


R1 = recorded("r1", [step("r1", k, 0.1 * k, kl=0.0, grad_norm=1.0) for k in (1, 2, 3)], [settings("r1")])
KL = recorded(
    "r1-kl",
    [step("r1-kl", k, 0.2 * k, "r1", kl=0.05, grad_norm=2.0) for k in (2, 3)],
    [settings("r1-kl", "r1", kl_coef=0.3, passes=2)],
)


def test_each_run_is_named_with_what_it_changed_against_the_first() -> None:
    series = compare([R1, KL, recorded("old", [step("old", 1, 0.5)], [])])
    assert header_lines(series) == [
        "r1: trained live, steps 1..3 (the baseline)",
        "r1-kl: a retrain of r1, steps 2..3; changed: kl_coef 0.3, passes 2",
        "old: trained live, steps 1; settings not recorded on the log",
    ]


def test_a_row_per_step_and_run_with_a_dash_where_a_run_lacks_the_step() -> None:
    rows = table(compare([R1, KL]))
    assert rows[0] == ["step", "run", "loss", "kl", "clip_fraction", "grad_norm", "logprob_gap"]
    assert rows[1:3] == [["1", "r1", "0.1", "0", "-", "1", "-"], ["1", "r1-kl", "-", "-", "-", "-", "-"]]
    assert rows[3:5] == [["2", "r1", "0.2", "0", "-", "1", "-"], ["2", "r1-kl", "0.4", "0.05", "-", "2", "-"]]
    text = render(rows).splitlines()
    assert len({len(line) for line in text}) == 1 and text[2].split() == rows[2]  # aligned


def test_a_range_of_steps_and_the_json_document() -> None:
    doc = document(compare([R1, KL], 3, 3))
    assert [r["run_id"] for r in doc["runs"]] == ["r1", "r1-kl"]
    assert doc["runs"][1] == {
        "run_id": "r1-kl",
        "retrain_of": "r1",
        "changed": {"kl_coef": 0.3, "passes": 2},
        "steps": [{"step": 3, "loss": 0.6000000000000001, "kl": 0.05, "clip_fraction": None,
                   "grad_norm": 2.0, "logprob_gap": None}],
    }  # fmt: skip


def test_a_run_with_no_step_in_the_range_is_one_error() -> None:
    with pytest.raises(
        ConfigError, match=r"run 'r1-kl' has no step to compare on cua.train_steps \(its steps: 2..3\)"
    ):
        compare([R1, KL], 1, 1)
    with pytest.raises(ConfigError, match="run 'nobody' has no step to compare on cua.train_steps$"):
        compare([R1, recorded("nobody", [], [])])
