"""The evaluation's plan and results file: layouts apart from training's by construction, task sets named
the ways the CLI takes them (a non-task directory refused by name), groups of k samples per instance that
no trainer joins, and the episodes folded from the records and read back."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from consumers.trainer.config import TrainerConfig
from consumers.trainer.stream.feeder import instance_work
from consumers.trainer.stream.join import Join
from cua_stream.app.learn.plan import EVAL_OFFSET, MAX_SEED, LearnPlan
from cua_stream.bus.codec import Delivery
from cua_stream.errors import ConfigError
from cua_stream.evaluation import results as files
from cua_stream.evaluation.plan import EVAL_SEED_BASE, EvalPlan, eval_seeds, is_eval_seed, resolve_tasks
from cua_stream.events import Discard, OutcomeEvent, Reward, ScoreEvent, TaskRef, WorkRequest
from cua_stream.identity import index_of, layout_seed
from cua_stream.tasks import TASKS, task_dir


def test_evaluation_layouts_are_apart_from_trainings() -> None:
    seeds = eval_seeds(0, 3)
    assert seeds == [EVAL_SEED_BASE, EVAL_SEED_BASE + 1, EVAL_SEED_BASE + 2]
    # GRPO's groups take their layout from a CRC-32 of the group id: below 2**32, below every eval seed
    assert EVAL_SEED_BASE > 0xFFFFFFFF >= zlib.crc32(b"any-run-g000007")
    grpo = WorkRequest(run_id="r", group_id="r-g000007", episode_id="e", task=TaskRef(name="click-test"),
                       sample_index=0, group_size=4, policy_version=0, created_at=0.0)  # fmt: skip
    assert not is_eval_seed(layout_seed(grpo))
    # learn's demonstrations, for small and very large learn seeds (its evaluations and probes are eval's)
    for seed in (0, 1, 7, 100_000, MAX_SEED):
        plan = LearnPlan(seed=seed, demo_seeds=EVAL_OFFSET - 1, eval_episodes=EVAL_OFFSET - 1,
                         probe_episodes=EVAL_OFFSET - 1)  # fmt: skip
        demos = plan.demo_layouts()
        assert max(demos) < EVAL_SEED_BASE and len(set(demos)) == len(demos), seed
        measured = plan.evaluation_plan().seeds + plan.probe_plan().seeds
        assert all(is_eval_seed(s) for s in measured) and len(set(measured)) == len(measured), seed
    with pytest.raises(ValueError, match="seed"):
        LearnPlan(seed=MAX_SEED + 1)  # its layouts would reach evaluation's
    with pytest.raises(ValueError, match="outside"):
        eval_seeds(-1, 2)
    with pytest.raises(ValueError, match="outside"):
        eval_seeds(2**32 - 1, 2)
    with pytest.raises(ValueError, match="outside the evaluation range"):
        EvalPlan(tasks=(TaskRef(name="click-test"),), samples=1, seeds=(5,))


def harbor_task(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "task.toml").write_text('version = "1.0"\n')
    return path


def test_task_sets_by_name_all_directory_dataset_and_glob(tmp_path: Path) -> None:
    assert [t.name for t in resolve_tasks("all")] == list(TASKS)
    assert resolve_tasks(" click-test, cua/read-value ,click-test") == [
        TaskRef(name="click-test"), TaskRef(name="read-value"),
    ]  # fmt: skip
    mine = harbor_task(tmp_path / "mine")
    assert resolve_tasks(str(mine)) == [TaskRef(name="mine", path=str(mine))]
    data = tmp_path / "dataset"
    one, two = harbor_task(data / "one"), harbor_task(data / "two")
    (data / "notes").mkdir()  # not a task: a dataset's other directories are passed over
    expected = [TaskRef(name="one", path=str(one)), TaskRef(name="two", path=str(two))]
    assert resolve_tasks(str(data)) == expected
    assert resolve_tasks(f"{data}/t*,click-test") == [expected[1], TaskRef(name="click-test")]
    assert resolve_tasks(str(task_dir("fill-form")))[0].name == "fill-form"


def test_bad_task_sets_are_refused_naming_the_entry(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"{empty} is a directory without a task.toml: not a Harbor task"):
        resolve_tasks(f"click-test,{empty}")
    with pytest.raises(ValueError, match="'clik-test' is neither a bundled task"):
        resolve_tasks("clik-test")
    with pytest.raises(ValueError, match="matches no task directory"):
        resolve_tasks(f"{tmp_path}/nothing-*")
    harbor_task(tmp_path / "a" / "same")
    harbor_task(tmp_path / "b" / "same")
    with pytest.raises(ValueError, match="two tasks are named 'same'"):
        resolve_tasks(f"{tmp_path}/a/same,{tmp_path}/b/same")
    with pytest.raises(ValueError, match="no task given"):
        resolve_tasks(" , ")


def test_each_instance_is_a_group_of_k_samples_on_one_layout() -> None:
    plan = EvalPlan(tasks=(TaskRef(name="click-test"), TaskRef(name="mine", path="/t/mine")), samples=3,
                    seeds=tuple(eval_seeds(0, 2)))  # fmt: skip
    assert plan.episodes == 12 and plan.unplayable(TASKS.__contains__) == ["mine"]
    work = instance_work("eval-1", plan.tasks, plan.seeds, samples=plan.samples, sampling={}, now=0.0)
    assert len(work) == 12 and len({w.episode_id for w in work}) == 12
    groups: dict[str, list[WorkRequest]] = {}
    for w in work:
        groups.setdefault(w.group_id, []).append(w)
    assert len(groups) == 4
    for members in groups.values():
        assert [w.sample_index for w in members] == [0, 1, 2]
        assert {w.group_size for w in members} == {3} and len({layout_seed(w) for w in members}) == 1
    assert work[0].episode_id == f"eval-1-click-test-s{EVAL_SEED_BASE}-e0"
    assert work[3].task == TaskRef(name="mine", path="/t/mine")


def test_no_trainer_takes_an_evaluations_groups() -> None:
    """A trainer joins only its own run's records (and issues only ``<run>-g<index>`` groups); see also
    tests/unit/test_trainer_join.py::test_other_runs_decided_groups_and_duplicates_are_skipped."""
    work = instance_work("eval-1", ["click-test"], eval_seeds(0, 1), samples=2, sampling={}, now=0.0)
    for trainer_run in ("train", "eval", "eval-1-click-test"):
        join = Join(trainer_run, group_size=2, call_topics=["t.turns"])
        for w in work:
            score = ScoreEvent(run_id=w.run_id, group_id=w.group_id, episode_id=w.episode_id,
                               verdict=Reward(value=1.0), policy_version=0, scored_at=0.0)  # fmt: skip
            assert join.add(Delivery(score, "t.scores", 0, 0, None, b"", (), 0), now=0.0) is None  # type: ignore[arg-type]
            assert index_of(trainer_run, w.group_id) is None
        assert join.groups == {}
    # and the one trainer that would join them, one of the evaluation's own run id, cannot be configured
    with pytest.raises(ConfigError, match="evaluation's run id"):
        TrainerConfig(run_id="eval-1", model_path="/checked-after-the-run-id")


def test_an_evaluations_run_id_is_one_no_trainer_takes() -> None:
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "cua_stream", "eval", "run", "--policy", "oracle", "--run-id",
                          "train-7"],
                         capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "200"})  # fmt: skip
    said = " ".join((res.stdout + res.stderr).replace("│", " ").split())
    assert res.returncode == 2 and "--run-id" in said and "starts with 'eval-'" in said, said


def outcome(episode: str, attempt: int, turns: int, start: float, end: float) -> OutcomeEvent:
    return OutcomeEvent(run_id="eval-1", group_id="g", episode_id=episode, attempt=attempt, task="click-test",
                        policy_version=0, agent_started=True, n_turns=turns, started_at=start,
                        finished_at=end)  # fmt: skip


def score(episode: str, attempt: int, verdict: Reward | Discard) -> ScoreEvent:
    return ScoreEvent(run_id="eval-1", group_id="g", episode_id=episode, attempt=attempt, verdict=verdict,
                      policy_version=0, scored_at=0.0)  # fmt: skip


def test_episodes_are_folded_from_the_scored_attempts_and_read_back(tmp_path: Path) -> None:
    w0, w1, w2 = instance_work("eval-1", ["click-test"], eval_seeds(4, 1), samples=3, sampling={}, now=0.0)
    scores = {
        w0.episode_id: score(w0.episode_id, 2, Reward(value=1.0)),
        w1.episode_id: score(w1.episode_id, 1, Discard(reason="sandbox_lost")),
    }
    outcomes = {
        (w0.episode_id, 1): outcome(w0.episode_id, 1, 9, 0.0, 50.0),  # the attempt a crash cut short
        (w0.episode_id, 2): outcome(w0.episode_id, 2, 3, 10.0, 14.5),
        (w1.episode_id, 1): outcome(w1.episode_id, 1, 1, 0.0, 2.0),
    }
    episodes = files.episodes_of([w0, w1, w2], scores, outcomes)
    assert [(e.verdict, e.reward, e.reason, e.turns, e.seconds) for e in episodes] == [
        ("reward", 1.0, "ok", 3, 4.5),
        ("discard", None, "sandbox_lost", 1, 2.0),
        ("unscored", None, "", None, None),
    ]
    assert {(e.task, e.seed) for e in episodes} == {("click-test", EVAL_SEED_BASE + 4)}
    results = files.EvalResults(run_id="eval-1", policy="oracle", environment="scripted", samples=3,
                                seeds=[EVAL_SEED_BASE + 4], tasks=["click-test"], created_at=1.0,
                                episodes=episodes)  # fmt: skip
    files.save(tmp_path / "r.json", results)
    assert files.load(tmp_path / "r.json") == results


def test_a_file_that_is_not_results_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"step": 3}')
    with pytest.raises(ConfigError, match=f"{other}: not a cua-stream eval results file"):
        files.load(other)
    with pytest.raises(ConfigError, match="cannot read it"):
        files.load(tmp_path / "missing.json")
    future = tmp_path / "future.json"
    future.write_text('{"schema_version": 2, "run_id": "r", "policy": "p", "environment": "scripted", '
                      '"samples": 1, "seeds": [], "tasks": [], "created_at": 0, "episodes": []}')  # fmt: skip
    with pytest.raises(ConfigError, match="results schema 2; this version reads 1"):
        files.load(future)


def test_an_evaluation_runs_only_under_an_evaluation_run_id() -> None:
    """A trainer takes any run's work but ``eval-`` runs': evaluating under another id would train on it."""
    import anyio

    from cua_stream.app.evaluate.episodes import Evaluation, evaluate
    from producers.config import ProducerConfig

    plan = EvalPlan(tasks=(TaskRef(name="click-test"),), samples=1, seeds=tuple(eval_seeds(0, 1)))
    ev = Evaluation(plan=plan, producer=ProducerConfig(), sampling={})
    with pytest.raises(ValueError, match="starts with 'eval-'"):
        anyio.run(evaluate, ev, "learn-1-base", "base")  # refused before anything is published
