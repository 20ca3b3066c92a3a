"""The chaos run's pure parts: the seeded fault schedule and the invariants checked from the topics."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import secrets
import socket
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from cua_stream.app.chaos import loop
from cua_stream.app.chaos.config import ChaosConfig
from cua_stream.app.chaos.evidence import listeners, listening
from cua_stream.app.chaos.fault_schedule import BROKER, POISON_TARGET, Action, plan, tally
from cua_stream.app.chaos.invariants import RunLog, check_all, totals
from cua_stream.app.chaos.resource_usage import Point, loop_lag, rss_mb
from cua_stream.app.chaos.runner import Chaos
from cua_stream.app.chaos.soak import memory_growth, spreads
from cua_stream.auth import SESSION_KEY_PREFIX, new_session_key, session_keys_in
from cua_stream.broker import ephemeral_range
from cua_stream.config import ConfigError
from cua_stream.events import (
    DeadLetter,
    Discard,
    GroupDropped,
    OutcomeEvent,
    PolicyVersion,
    Reward,
    ScoreEvent,
    TaskRef,
    TrainStep,
    WorkRequest,
)

# -- the schedule ---------------------------------------------------------------------------------------


def test_a_schedule_is_a_function_of_its_seed() -> None:
    a = plan(7, 50, every_s=2.0, producers=3)
    assert a == plan(7, 50, every_s=2.0, producers=3)
    assert a != plan(8, 50, every_s=2.0, producers=3)


def test_faults_arrive_at_the_requested_mean_rate_on_every_kind_of_target() -> None:
    faults = plan(1, 3000, every_s=2.5, producers=2, max_pause_s=9.0)
    times = [f.at_s for f in faults]
    assert times == sorted(times) and len(faults) == 3000
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(2.5, rel=0.1)
    kinds = tally(faults)
    targets = {t for t, _ in kinds}
    assert targets == {"producer", "scorer", "trainer", "gateway", "engine", BROKER, POISON_TARGET}
    assert {f.target for f in faults if f.target.startswith("producer")} == {"producer-0", "producer-1"}
    for f in faults:
        if f.target == BROKER:
            assert f.action is Action.BROKER_RESTART
        elif f.target == POISON_TARGET:
            assert f.action is Action.POISON
        else:
            assert f.action in (Action.KILL, Action.PAUSE)
        if f.action is Action.PAUSE:
            assert 0.5 <= f.hold_s <= 9.0
    assert kinds[("producer", "kill")] > kinds[("producer", "pause")] > 0  # kills are the common fault


def test_no_producer_faults_without_producers_and_bad_arguments_are_refused() -> None:
    assert not [f for f in plan(3, 200, every_s=1.0, producers=0) if f.target.startswith("producer")]
    with pytest.raises(ValueError, match="every_s"):
        plan(0, 10, every_s=0.0, producers=1)


# -- the invariants -------------------------------------------------------------------------------------

RUN = "run-c"


def work(g: int, e: int) -> WorkRequest:
    return WorkRequest(
        run_id=RUN, group_id=f"g{g}", episode_id=f"g{g}-e{e}", task=TaskRef(name="t"), sample_index=e,
        group_size=2, policy_version=0, created_at=float(g),
    )  # fmt: skip


def outcome(g: int, e: int, attempt: int = 1) -> OutcomeEvent:
    return OutcomeEvent(
        run_id=RUN, group_id=f"g{g}", episode_id=f"g{g}-e{e}", attempt=attempt, task="t", policy_version=0,
        agent_started=True, rewards={"reward": 1.0}, started_at=0.0, finished_at=1.0,
    )  # fmt: skip


def score(g: int, e: int, attempt: int = 1, verdict: Reward | Discard | None = None) -> ScoreEvent:
    return ScoreEvent(
        run_id=RUN, group_id=f"g{g}", episode_id=f"g{g}-e{e}", attempt=attempt,
        verdict=verdict or Reward(value=1.0), policy_version=0, scored_at=2.0,
    )  # fmt: skip


def step(n: int, *groups: int, attempts: dict[str, int] | None = None) -> TrainStep:
    trained = attempts if attempts is not None else {f"g{g}-e{e}": 1 for g in groups for e in range(2)}
    return TrainStep(
        run_id=RUN, step=n, policy_version=n, n_groups=len(groups), n_episodes=len(trained), n_samples=4,
        loss=0.1, group_ids=tuple(f"g{g}" for g in groups), finished_at=3.0, attempts=trained,
    )  # fmt: skip


def policy(v: int) -> PolicyVersion:
    return PolicyVersion(run_id=RUN, version=v, weights_path=f"w{v}", step=v, published_at=4.0)


def dropped(g: int, reason: str = "discarded") -> GroupDropped:
    return GroupDropped(run_id=RUN, group_id=f"g{g}", reason=reason, trainer_version=0, dropped_at=5.0)


def a_good_run() -> RunLog:
    """Six groups of two: g0, g1 trained in step 1; g2 dropped (an episode was discarded), g3 trained in
    step 2 where g3-e1 ran twice (its first producer died after publishing); g4, g5 still in flight."""
    groups = range(6)
    outcomes = [outcome(g, e) for g in groups for e in range(2)] + [outcome(3, 1, attempt=2)]
    scores = [score(g, e) for g in groups for e in range(2) if (g, e) != (2, 0)]
    scores.append(score(2, 0, verdict=Discard(reason="sandbox_lost")))
    return RunLog(
        work=[work(g, e) for g in groups for e in range(2)],
        outcomes=outcomes,
        scores=scores,
        steps=[step(1, 0, 1), step(2, 3)],
        drops=[dropped(2)],
        policy=[policy(1), policy(2)],
        dead_letters=[
            DeadLetter(
                run_id="", reason="undecodable", error="x", source_topic="o", partition=1, offset=9, at=0.0
            )
        ],
        undecodable=[("o", 1, 9)],
    )


def problems(log: RunLog) -> dict[str, tuple[str, ...]]:
    return {c.name: c.problems for c in check_all(log, max_in_flight=2) if c.problems}


def test_a_run_that_kept_its_promises_passes_every_check() -> None:
    checks = check_all(a_good_run(), max_in_flight=2)
    assert [c.name for c in checks if not c.ok] == []
    assert totals(checks) == (0, 0)
    assert {c.name: c.checked for c in checks}["trained episodes = the expected set"] == 6


@pytest.mark.parametrize(
    ("change", "check", "lost", "duplicated"),
    [
        (lambda r: {"outcomes": r.outcomes[1:]}, "every work request has an outcome", 1, 0),
        (lambda r: {"outcomes": [*r.outcomes, outcome(0, 0)]}, "one outcome per finished attempt", 0, 1),
        (lambda r: {"scores": r.scores[1:]}, "one score per answered episode", 1, 0),
        (lambda r: {"scores": [*r.scores, score(0, 1)]}, "one score per answered episode", 0, 1),
        (lambda r: {"scores": [*r.scores[1:], score(0, 0, attempt=5)]}, "one score per answered episode", 0, 0),
        (lambda r: {"steps": [*r.steps, step(3, 1)]}, "every group trained once or dropped with a reason", 0, 1),
        (lambda r: {"drops": [*r.drops, dropped(0)]}, "every group trained once or dropped with a reason", 0, 1),
        (lambda r: {"steps": r.steps[1:]}, "every group trained once or dropped with a reason", 2, 0),
        (
            lambda r: {"steps": [r.steps[0], step(2, 3, attempts={"g3-e0": 1, "g3-e1": 3})]},
            "trained attempts have an outcome and a reward",
            0,
            0,
        ),
        (
            lambda r: {"steps": [r.steps[0], step(2, 3, attempts={"g3-e0": 1})]},
            "trained episodes = the expected set",
            1,
            0,
        ),
        (
            lambda r: {"steps": [r.steps[0], step(2, 3, attempts={"g3-e0": 1, "g3-e1": 2, "g0-e0": 1})]},
            "trained episodes = the expected set",
            0,
            1,
        ),
        (lambda r: {"policy": [policy(2), policy(1)]}, "policy versions only increase", 0, 0),
        (lambda r: {"steps": [r.steps[0], msgspec.structs.replace(r.steps[1], step=3)]}, "policy versions only increase", 0, 0),
        (lambda r: {"dead_letters": []}, "undecodable records are dead-lettered", 1, 0),
        (lambda r: {"drops": [dropped(2, reason="")]}, "every discard and drop has a reason", 0, 0),
        (lambda r: {"secrets_found": ["logs/producer-0.log"]}, "no session key in records, logs, files, metrics", 0, 0),
    ],
    ids=[
        "an-outcome-lost", "an-outcome-twice", "a-score-lost", "a-score-twice", "a-score-of-no-outcome",
        "a-group-trained-twice", "a-group-trained-and-dropped", "an-early-group-never-decided",
        "an-attempt-without-outcome-trained", "an-expected-episode-untrained", "an-episode-trained-twice",
        "a-version-going-back", "a-step-skipped", "a-poison-record-not-dead-lettered", "a-drop-without-reason",
        "a-session-key-leaked",
    ],
)  # fmt: skip
def test_each_broken_promise_is_caught_by_its_check(
    change: Callable[[RunLog], dict[str, Any]], check: str, lost: int, duplicated: int
) -> None:
    run = a_good_run()
    broken = dataclasses.replace(run, **change(run))
    found = problems(broken)
    assert check in found, found
    by_name = {c.name: c for c in check_all(broken, max_in_flight=2)}
    assert (by_name[check].lost, by_name[check].duplicated) == (lost, duplicated)


def test_a_retried_attempt_is_not_a_duplicate_and_the_in_flight_tail_is_not_lost() -> None:
    run = a_good_run()
    assert ("g3-e1", 2) in {(o.episode_id, o.attempt) for o in run.outcomes}  # two attempts, one score
    assert not problems(run)
    # one more group in flight than the window allows: the oldest undecided one counts as lost
    assert "every group trained once or dropped with a reason" in problems(dataclasses.replace(run, drops=[]))


def test_a_session_key_is_found_wherever_it_is_written_and_nothing_else_looks_like_one() -> None:
    key = new_session_key()
    assert key.startswith(SESSION_KEY_PREFIX) and len(key) == len(SESSION_KEY_PREFIX) + 32
    line = f'2026-12-01 INFO POST /v1/chat "Authorization: Bearer {key}"'.encode()
    assert session_keys_in(line) == [key.encode()]
    assert session_keys_in(json.dumps({"api_key": key}).encode()) == [key.encode()]
    assert session_keys_in(secrets.token_urlsafe(24).encode() + b" cuask_short") == []
    assert new_session_key() != key


# -- the soak's reading of its samples ------------------------------------------------------------------


def test_memory_that_settles_is_bounded_and_memory_that_keeps_climbing_is_not() -> None:
    minutes = [i * 5.0 for i in range(360)]  # 30 min, a sample every 5 s
    settles = [Point(t, "rss:scorer", 300 + 60 * min(t, 300) / 300) for t in minutes]  # +60 MB, then flat
    climbs = [Point(t, "rss:trainer", 900 + t / 10) for t in minutes]  # +18 MB/min, never stops
    noisy = [Point(t, "rss:gateway", 400 + (25 if i % 7 == 0 else 0)) for i, t in enumerate(minutes)]
    growth = {g.name: g for g in memory_growth([*settles, *climbs, *noisy])}
    assert growth["scorer"].bounded and growth["gateway"].bounded
    assert not growth["trainer"].bounded and growth["trainer"].grew_mb == pytest.approx(90, abs=5)
    assert growth["trainer"].peak_mb == pytest.approx(900 + minutes[-1] / 10)


def test_spreads_and_the_samplers_parsers() -> None:
    points = [Point(float(i), "loop:producer-0", i / 1000) for i in range(1, 101)]
    (s,) = spreads(points, "loop")
    assert (s.name, s.p50, s.p99, s.max) == ("producer-0", 0.051, 0.1, 0.1)
    assert loop_lag("# TYPE x gauge\ncua_event_loop_lag_seconds 0.012500\n") == 0.0125
    assert loop_lag("other 1\n") is None
    mb = rss_mb(os.getpid())
    assert mb is not None and 10 < mb < 20_000
    assert rss_mb(2**22 + 12345) is None  # beyond pid_max: no such process


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"steps": 0}, "chaos.steps"),
        ({"producers": 0}, "chaos.producers"),
        ({"faults": -1}, "chaos.faults"),
        ({"base_port": 80}, "chaos.base_port"),
        ({"desktop_size": 10}, "chaos.desktop_size"),
        ({"duration_s": -5.0}, "chaos.duration_s"),
    ],
)
def test_a_bad_chaos_setting_fails_at_start_naming_its_field(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ChaosConfig(**settings)


@pytest.mark.anyio
async def test_a_chaos_run_refuses_a_home_holding_an_earlier_run(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text("{}")
    with pytest.raises(ConfigError, match="chaos.home: .* is not empty"):
        await Chaos(ChaosConfig(home=str(tmp_path)), emit=print).run()
    assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == ["report.json"]  # nothing started


def test_a_base_port_whose_ports_reach_the_ephemeral_range_is_found() -> None:
    cfg = ChaosConfig(base_port=32750, producers=2)  # its ports: 32750, 32751, 32760..32763, 32770, 32771
    assert loop.ephemeral_clash(loop.ports(cfg), (32768, 60999)) == 32770
    assert loop.ephemeral_clash(loop.ports(cfg), (32772, 60999)) is None
    assert loop.ephemeral_clash(loop.ports(ChaosConfig(base_port=33100)), (32768, 60999)) == 33100


@pytest.mark.anyio
async def test_a_chaos_run_refuses_a_base_port_in_the_ephemeral_range_before_it_starts_anything(
    tmp_path: Path,
) -> None:
    low, high = ephemeral_range()
    with pytest.raises(ConfigError, match=f"chaos.base_port: {low + 100} .* ephemeral range {low}-{high}"):
        await Chaos(ChaosConfig(home=str(tmp_path / "run"), base_port=low + 100), emit=print).run()
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


def test_listening_sockets_are_read_from_the_kernels_tables() -> None:
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 00000000:9C41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 0100007F:9C42 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
    )
    assert listening(tcp, {40000, 40001, 40002}) == [("127.0.0.1", 40000), ("0.0.0.0", 40001)]
    tcp6 = (
        "  sl  local_address                         remote_address                        st\n"
        "   0: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A\n"
        "   1: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A\n"
    )
    assert listening(tcp6, {8080, 8081}) == [("127.0.0.1", 8080), ("::", 8081)]
    with socket.socket() as loopback, socket.socket() as everywhere:
        loopback.bind(("127.0.0.1", 0))
        everywhere.bind(("0.0.0.0", 0))
        loopback.listen()
        everywhere.listen()
        ports = {loopback.getsockname()[1], everywhere.getsockname()[1]}
        assert sorted(listeners(ports)) == sorted(
            [("127.0.0.1", loopback.getsockname()[1]), ("0.0.0.0", everywhere.getsockname()[1])]
        )


def test_an_exposed_service_fails_the_run_and_an_unprobed_run_says_so() -> None:
    run = a_good_run()
    assert "loopback only; admin routes need the admin key" not in problems(
        dataclasses.replace(run, exposure=[])
    )
    bad = dataclasses.replace(run, exposure=["POST http://127.0.0.1:1/admin/drain with no key: 200"])
    assert problems(bad)["loopback only; admin routes need the admin key"] == (bad.exposure[0],)
    (check,) = [c for c in check_all(run, max_in_flight=2) if c.name.startswith("loopback")]
    assert check.ok and check.checked == 0  # not probed: nothing claimed


def test_a_slow_early_group_within_the_window_is_in_flight_and_a_group_issued_short_is_lost() -> None:
    run = a_good_run()
    # g1 still running (a killed producer's episode) while g4 finished and trained: 2 undecided, window 2
    slow = dataclasses.replace(run, steps=[step(1, 0, 4), step(2, 3)])
    assert not problems(slow)
    short = dataclasses.replace(run, work=[w for w in run.work if w.episode_id != "g5-e1"])
    found = problems(short)["every group trained once or dropped with a reason"]
    assert found == ("g5: issued 1 of its 2 episodes",)


def test_the_reports_rows_and_lines_are_what_the_command_prints(tmp_path: Path) -> None:
    from cua_stream.app.chaos.fault_schedule import Fault
    from cua_stream.app.chaos.invariants import Check
    from cua_stream.app.chaos.report import Applied, ChaosReport, fault_rows, summary_line, tail_lines

    applied = [Applied(Fault(1.0, Action.KILL, "producer-0", 0), 1.2, 3.4),
               Applied(Fault(2.0, Action.KILL, "producer-1", 0), 2.2, 1.1),
               Applied(Fault(3.0, Action.PAUSE, "engine", 5.0), 3.0)]  # fmt: skip
    assert fault_rows(applied) == [("engine", "pause", "1", "-"), ("producer", "kill", "2", "3.4 / 3.4")]
    report = ChaosReport(
        "r", tmp_path, applied, [], [Check("turns", 9, ("x",), lost=2)], {"engine": [], "producer-0": [-9]},
        {}, 61.4, 12, 48, discards={"timeout": 2},
    )  # fmt: skip
    assert summary_line(report) == (
        "3 faults applied (0 not applied: the run was stopping), 12 steps, 48 episodes in 61s; lost 2, "
        "duplicated 0; exits nobody asked for: producer-0 [-9]"
    )
    assert tail_lines(report) == [
        "episodes discarded: timeout x2", "groups dropped: none", f"logs, checkpoints and broker data: {tmp_path}"
    ]  # fmt: skip
