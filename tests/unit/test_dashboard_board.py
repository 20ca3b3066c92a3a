"""The dashboard's board (pure): what it shows from the records, whatever order the topics arrive in, in
bounded memory."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from consumers.dashboard import board as board_module
from consumers.dashboard.board import Board
from cua_stream.events import (
    CallKind,
    Discard,
    EvalReport,
    GroupDropped,
    ImageRef,
    Logprobs,
    OutcomeEvent,
    PolicyVersion,
    Reward,
    ScoreEvent,
    TaskRef,
    TokenIds,
    TrainStep,
    TurnEvent,
    WorkRequest,
)  # fmt: skip


def work(g: int, version: int) -> WorkRequest:
    return WorkRequest(run_id="r", group_id=f"g{g}", episode_id=f"g{g}-e0", task=TaskRef(name="t"),
                       sample_index=0, group_size=1, policy_version=version, created_at=0.0)  # fmt: skip


def step(n: int, *groups: int) -> TrainStep:
    return TrainStep(run_id="r", step=n, policy_version=n, n_groups=len(groups), n_episodes=1, n_samples=1,
                     loss=0.0, group_ids=tuple(f"g{g}" for g in groups), finished_at=0.0,
                     metrics={"mean_reward": n / 10, "logprob_gap": 0.0, "grad_norm": 1.0})  # fmt: skip


def test_staleness_is_the_same_whichever_topic_is_read_first() -> None:
    records = [work(0, 0), work(1, 0), work(2, 1), step(1, 0), step(2, 1, 2)]
    results = set()
    for order in itertools.permutations(records):
        b = Board()
        for r in order:
            b.add(r)
        results.add(tuple(sorted(b.staleness.items())))
    assert results == {((0, 2), (1, 1))}  # g0 and g2 trained on the next version; g1 one version late


def test_a_retrains_steps_are_kept_apart_from_the_live_ones() -> None:
    """A retrain (``cua-stream retrain``) trains the live run's groups again: its steps are not a second
    series on the live charts, not counted stale again, not where an episode was trained; they are shown
    as the retrain's own figures."""
    retrained = [msgspec.structs.replace(step(n, n - 1), run_id="r-kl", retrain_of="r", loss=0.5 * n,
                                         metrics={"kl": 0.1, "grad_norm": 2.0}) for n in (1, 2)]  # fmt: skip
    b = Board()
    for r in [work(0, 0), work(1, 0), step(1, 0), *retrained, step(2, 1), retrained[0]]:
        b.add(r)
    summary = b.summary()
    assert [(s["run_id"], s["step"]) for s in summary["steps"]] == [("r", 1), ("r", 2)]
    assert dict(b.staleness) == {0: 1, 1: 1} and b.group_steps["g0"].run_id == "r"
    assert summary["retrains"] == [{
        "run_id": "r-kl", "retrain_of": "r",
        "steps": [{"step": 1, "loss": 0.5, "kl": 0.1, "clip_fraction": None, "grad_norm": 2.0, "logprob_gap": None},
                  {"step": 2, "loss": 1.0, "kl": 0.1, "clip_fraction": None, "grad_norm": 2.0, "logprob_gap": None}],
    }]  # fmt: skip


def test_each_steps_reward_by_task_whichever_topic_is_read_first() -> None:
    def scored(g: int, value: float) -> ScoreEvent:
        return ScoreEvent(run_id="r", group_id=f"g{g}", episode_id=f"g{g}-e0", verdict=Reward(value=value),
                          policy_version=0, scored_at=0.0)  # fmt: skip

    tasks = {0: "click", 1: "fill", 2: "click"}
    works = [msgspec.structs.replace(work(g, 0), task=TaskRef(name=t)) for g, t in tasks.items()]
    records = [*works, scored(0, 1.0), scored(1, 0.0), scored(2, 0.0), step(1, 0, 1), step(2, 2)]
    results = set()
    for order in itertools.permutations(records):
        b = Board()
        for r in order:
            b.add(r)
        results.add(tuple(tuple(sorted(s["by_task"].items())) for s in b.summary()["steps"]))
    assert results == {((("click", 1.0), ("fill", 0.0)), (("click", 0.0),))}


def test_verdicts_drops_latency_throughput_and_an_episodes_calls_in_order() -> None:
    b = Board()
    ids = {"run_id": "r", "group_id": "g0", "episode_id": "g0-e0"}
    image = ImageRef(sha256="ab" * 32, size=1, width=1, height=1)
    for seq in (1, 0):  # out of order on the topic
        b.add(TurnEvent(**ids, seq=seq, call_id=f"c{seq}", kind=CallKind.AGENT_TURN, prompt_ids=TokenIds([1]),
                        completion_ids=TokenIds([5, 6]), completion_logprobs=Logprobs([-1.0, -1.0]),
                        images=(image,), policy_version=0, finish_reason="stop", started_at=0.0,
                        engine_ms=100.0 * (seq + 1), gateway_ms=110.0 * (seq + 1)))  # fmt: skip
    b.add(OutcomeEvent(**ids, task="t", policy_version=0, agent_started=True, rewards={"reward": 1.0},
                       n_turns=2, started_at=60.0, finished_at=125.0))  # fmt: skip
    b.add(ScoreEvent(**ids, verdict=Reward(value=1.0), policy_version=0, scored_at=0.0))
    b.add(ScoreEvent(**{**ids, "episode_id": "g0-e1"}, verdict=Discard(reason="sandbox_lost"),
                     policy_version=0, scored_at=0.0))  # fmt: skip
    b.add(GroupDropped(run_id="r", group_id="g0", reason="discarded", trainer_version=0, dropped_at=0.0))
    b.add(PolicyVersion(run_id="r", version=4, weights_path="w", step=4, published_at=0.0))
    s = b.summary()
    assert s["verdicts"] == {"reward 1 (ok)": 1, "discard (sandbox_lost)": 1} and s["drops"] == {
        "discarded": 1
    }
    assert s["latency_ms"] == {"engine_p50": 200.0, "engine_p95": 200.0, "gateway_p50": 220.0,
                               "gateway_p95": 220.0, "calls": 2}  # fmt: skip
    assert s["throughput"] == [{"minute": 2, "episodes": 1}] and s["latest_version"] == 4
    ep = b.episodes["g0-e0"]
    assert [c.seq for c in ep.calls] == [0, 1] and ep.verdict == "reward 1 (ok)" and ep.task == "t"
    assert ep.outcome is not None and ep.outcome["seconds"] == 65.0
    assert s["tasks"] == {
        "t": {"scored": 1, "mean_reward": 1.0, "discarded": 0},
        "?": {"scored": 1, "mean_reward": 0.0, "discarded": 1},
    }


def test_the_board_keeps_a_bounded_window_of_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(board_module, "EPISODES_KEPT", 5)
    b = Board()
    for g in range(12):
        b.add(work(g, 0))
    assert list(b.episodes) == [f"g{g}-e0" for g in range(7, 12)]
    assert len(b.summary()["episodes"]) == 5 and b.records == 12


def test_the_eval_panel_shows_each_evaluation_per_task_newest_last_in_bounded_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cua_stream.evaluation.report import report_of
    from cua_stream.evaluation.results import EvalEpisode, EvalResults

    def results(run: str, rewards: list[float], at: float) -> EvalResults:
        task = ("read-value", "click-button")
        episodes = [
            EvalEpisode(
                episode_id=f"{run}-{i}", task=task[i % 2], seed=7, sample=i // 2, verdict="reward", reward=r
            )
            for i, r in enumerate(rewards)
        ]
        return EvalResults(run_id=run, policy="/m/run-1/weights-v3", environment="scripted", samples=2,
                           seeds=[7], tasks=["read-value", "click-button"], created_at=at, episodes=episodes)  # fmt: skip

    board = Board()
    v3 = PolicyVersion(
        run_id="run-1", version=3, weights_path="/m/run-1/weights-v3", step=3, published_at=12.5
    )
    board.add(report_of(results("eval-b", [1.0, 0.0, 1.0, 1.0], at=20.0), version=v3))
    board.add(report_of(results("eval-a", [0.0, 0.0, 0.0, 0.0], at=10.0)))
    shown = board.summary()["evals"]
    assert [e["run_id"] for e in shown] == ["eval-a", "eval-b"]  # by creation time, not arrival
    a, b = shown
    assert a["policy"] == "/m/run-1/weights-v3" and b["policy"] == "run-1 v3"
    assert a["lag_s"] is None and b["lag_s"] == 7.5  # evaluated 7.5 s after v3 was published
    rows = {t["task"]: t for t in b["tasks"]}
    assert list(rows) == ["read-value", "click-button", "overall"]
    assert rows["read-value"]["rate"] == 1.0 and rows["click-button"]["rate"] == 0.5
    assert rows["overall"]["rate"] == 0.75 and rows["overall"]["scored"] == 4
    assert rows["overall"]["low"] == 0.301 and rows["overall"]["high"] == 0.954  # Wilson, 3 of 4
    assert rows["click-button"]["pass_at"] == {"1": 0.5, "2": 1.0}
    assert a["tasks"][-1]["rate"] == 0.0

    monkeypatch.setattr(board_module, "EVALS_KEPT", 3)
    for i in range(5):
        board.add(report_of(results(f"eval-{i}", [1.0, 1.0], at=100.0 + i)))
    assert [e["run_id"] for e in board.summary()["evals"]] == ["eval-2", "eval-3", "eval-4"]


def test_an_episode_links_to_the_step_that_trained_it_whichever_topic_is_read_first() -> None:
    trained = msgspec.structs.replace(step(3, 1), attempts={"g1-e0": 7})
    for order in itertools.permutations([work(1, 2), trained, work(2, 2), step(4, 2)]):
        board = Board()
        for event in order:
            board.add(event)
        assert board.trained_in("g1-e0") == {"run_id": "r", "step": 3, "attempt": 7}
        assert board.trained_in("g2-e0") == {"run_id": "r", "step": 4, "attempt": None}  # an older record
        assert [(s["run_id"], s["step"]) for s in board.summary()["steps"]] == [("r", 3), ("r", 4)]
    board.add(msgspec.structs.replace(trained, step=9))  # the same group in a later record: the first counts
    assert board.trained_in("g1-e0")["step"] == 3  # type: ignore[index]
    board.add(work(5, 0))
    board.add(msgspec.structs.replace(step(5, 5), attempts={"other-episode": 0}))
    assert board.trained_in("g5-e0") is None  # its group trained, without it (a discarded sibling)
    assert board.trained_in("nope") is None


def test_the_learning_panel_shows_each_learn_runs_table_newest_first_in_bounded_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`learn`'s closing table, rebuilt from the evals topic's reports: blind baseline, base, after SFT,
    after GRPO per task; an SFT probe and `cua-stream eval`'s own evaluations are not columns of it."""
    from cua_stream.evaluation.report import report_of
    from cua_stream.evaluation.results import EvalEpisode, EvalResults
    from cua_stream.learn_table import blind_report

    def stage(run: str, name: str, rewards: list[float], at: float) -> EvalReport:
        episodes = [EvalEpisode(episode_id=f"{run}-{name}-{i}", task="click-test", seed=i, sample=0,
                                verdict="reward", reward=r) for i, r in enumerate(rewards)]  # fmt: skip
        return report_of(EvalResults(run_id=f"eval-{run}-{name}", policy=name, environment="local", samples=1,
                                     seeds=list(range(len(rewards))), tasks=["click-test"], created_at=at,
                                     episodes=episodes))  # fmt: skip

    board = Board()
    assert board.summary()["learn"] == []
    board.add(stage("learn-a", "grpo", [1.0, 1.0, 0.0, 1.0], at=30.0))  # the topic's order is not the run's
    board.add(stage("learn-a", "base", [0.0, 0.0, 0.0, 0.0], at=10.0))
    board.add(blind_report(["click-test"], [1, 2, 3, 4, 5], "eval-learn-a-blind", 5.0))
    board.add(stage("learn-a", "sft-e1", [1.0, 1.0, 1.0, 1.0], at=15.0))  # a probe: not a column
    board.add(stage("learn-b", "base", [1.0, 0.0], at=40.0))
    board.add(stage("x", "/models/base", [1.0], at=50.0))  # cua-stream eval of a model: not a learn run
    b, a = board.summary()["learn"]
    assert (a["run"], b["run"]) == ("learn-a", "learn-b")
    assert [r["task"] for r in a["rows"]] == ["click-test", "overall"]
    cells = a["rows"][0]["cells"]
    assert cells["blind"] == {"rate": 1.0, "successes": 5, "scored": 5, "low": pytest.approx(0.5655, abs=1e-4),
                              "high": 1.0, "text": "1.00 [0.57, 1.00] (5/5)"}  # fmt: skip
    assert (cells["base"]["successes"], cells["base"]["scored"]) == (0, 4)
    assert cells["sft"] is None  # no SFT stage reported
    assert (cells["grpo"]["rate"], cells["grpo"]["scored"]) == (0.75, 4)
    assert b["rows"][0]["cells"]["blind"] is None and b["rows"][0]["cells"]["base"]["rate"] == 0.5

    monkeypatch.setattr(board_module, "LEARN_RUNS_KEPT", 2)
    monkeypatch.setattr(board_module, "LEARN_RUNS_SHOWN", 2)
    board.add(stage("learn-c", "base", [1.0], at=60.0))
    assert [r["run"] for r in board.summary()["learn"]] == ["learn-c", "learn-b"]
    assert list(board.learn_runs) == ["learn-b", "learn-c"]  # learn-a forgotten


def test_what_a_record_names_is_kept_bounded_strings_and_a_steps_tasks() -> None:
    """Records are written by anyone who reaches the broker: a task name of 100,000 characters and a step
    of 500 groups of as many tasks are shown in part, and a step's group ids are not sent to the page."""
    board = Board()
    long_name = "x" * 100_000
    board.add(msgspec.structs.replace(work(0, 0), task=TaskRef(name=long_name)))
    board.add(ScoreEvent(run_id="r", group_id="g0", episode_id="g0-e0", verdict=Reward(value=1.0),
                         policy_version=0, scored_at=0.0))  # fmt: skip
    for g in range(1, 100):
        board.add(msgspec.structs.replace(work(g, 0), task=TaskRef(name=f"task-{g:03d}")))
        board.add(ScoreEvent(run_id="r", group_id=f"g{g}", episode_id=f"g{g}-e0", verdict=Reward(value=0.0),
                             policy_version=0, scored_at=0.0))  # fmt: skip
    board.add(step(1, *range(100)))
    summary = board.summary()
    (shown,) = summary["steps"]
    assert "group_ids" not in shown and shown["tasks_total"] == 100 and len(shown["by_task"]) == 20
    task = max(summary["tasks"], key=len)
    assert len(task) == 200 and task.endswith("…") and task.startswith("xxx")
    assert len(msgspec.json.encode(summary)) < 50_000
