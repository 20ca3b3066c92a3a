"""The loop benchmark's summaries (``cua_stream.app.chaos.speed``) and the step record's staleness count, on
hand-built records: walls, shares, the engine work a weight push loses, and the goals' verdicts."""

from __future__ import annotations

import math

from consumers.trainer.episodes.samples import assemble
from consumers.trainer.step_record import token_staleness
from cua_stream.app.chaos.speed import EngineSample, LoopSpeed, counter_at, goals, summarise
from cua_stream.events import TrainStep, VersionSpan
from tests.unit.test_trainer_samples import call


def step(n: int, finished_at: float, **metrics: float) -> TrainStep:
    return TrainStep(
        run_id="r", step=n, policy_version=n, n_groups=1, n_episodes=2, n_samples=2, loss=0.0,
        metrics=metrics, finished_at=finished_at,
    )  # fmt: skip


def test_trained_tokens_count_at_their_own_version_across_a_weight_update() -> None:
    # c0 sampled by v2 (2 tokens), c1 across an update: 1 token of v3, 2 of v4; prompts count nothing.
    spans = (VersionSpan(version=3, start=0, end=1), VersionSpan(version=4, start=1, end=3))
    samples = assemble(
        [call(0, None, [1, 2], [10, 11], version=2), call(1, 0, [5], [12, 13, 14], spans=spans)]
    )
    assert token_staleness(samples.samples, version=4) == {2: 2, 1: 1, 0: 2}
    assert token_staleness(samples.samples, version=2) == {0: 5}  # newer than the trainer: not stale


def test_counters_are_interpolated_between_samples_and_clamped_at_the_ends() -> None:
    samples = [EngineSample(10.0, 0.0, 0.0), EngineSample(12.0, 1.0, 4.0)]
    assert counter_at(samples, 11.0) == (0.5, 2.0)
    assert counter_at(samples, 5.0) == (0.0, 0.0)
    assert counter_at(samples, 20.0) == (1.0, 4.0)


def test_summary_of_a_run() -> None:
    # The engine advances 2 slots a second, except during the push at t=104..105 where it advances 0.5.
    engine = [
        EngineSample(100.0, 0.0, 0.0),
        EngineSample(104.0, 4.0, 8.0),
        EngineSample(105.0, 4.5, 8.5),
        EngineSample(110.0, 9.5, 18.5),
    ]
    steps = [
        step(2, 110.0, wait_s=1.0, train_s=2.0, previous_push_at=104.0, previous_push_s=1.0,
             stale_tokens_0=30.0, stale_tokens_1=10.0),
        step(1, 103.0, wait_s=3.0, train_s=2.0, stale_tokens_0=60.0),
    ]  # fmt: skip
    speed = summarise(steps, started_at=100.0, engine=engine)
    assert speed.steps == 2 and speed.wall_s == 10.0
    assert math.isclose(speed.engine_busy, 0.95)
    assert math.isclose(speed.trainer_idle, 0.4) and math.isclose(speed.trainer_train, 0.4)
    assert speed.staleness == {0: 90, 1: 10}
    assert speed.update_s == [1.0]
    # 18 slot-s in the 9 s outside the push: 2 a second; the push used 0.5, worth 0.25 s: 0.75 s lost
    assert math.isclose(speed.update_idle_s[0], 0.75)


def row(wall_s: float, idle: float) -> LoopSpeed:
    return LoopSpeed(
        steps=4, wall_s=wall_s, engine_busy=0.5, trainer_idle=0.1, trainer_train=0.5, staleness={},
        update_s=[idle], update_idle_s=[idle],
    )  # fmt: skip


def test_goals_compare_async_with_sync_and_each_mode_with_drain_at_its_bound() -> None:
    rows = {
        "sync": row(100.0, 1.0),
        "s1-drain": row(60.0, 2.0),
        "s1-in_place": row(50.0, 0.05),
        "s1-retract": row(55.0, 0.5),
    }
    speedup, in_place, retract = goals(rows)
    assert math.isclose(speedup.value, 2.0) and speedup.met is True
    assert math.isclose(in_place.value, 0.025) and in_place.met is True
    assert math.isclose(retract.value, 0.25) and retract.met is False
    only_sync = goals({"sync": row(100.0, 1.0)})
    assert [g.met for g in only_sync] == [None, None, None]


def test_the_scripted_long_tail_is_a_seeded_share_of_episodes() -> None:
    from producers.scripted import ScriptedRunner

    runner = ScriptedRunner(
        model_name="m", max_turns=1, action_latency_s=0.1, long_fraction=0.25, long_factor=8
    )
    latencies = [runner.action_latency_for(seed, index) for seed in range(100) for index in range(4)]
    assert set(latencies) == {0.1, 0.1 * 8}
    assert 60 <= latencies.count(0.1 * 8) <= 140  # a quarter of 400, give or take
    assert latencies == [runner.action_latency_for(seed, index) for seed in range(100) for index in range(4)]
    flat = ScriptedRunner(model_name="m", max_turns=1, action_latency_s=0.1)
    assert {flat.action_latency_for(seed, 0) for seed in range(50)} == {0.1}
