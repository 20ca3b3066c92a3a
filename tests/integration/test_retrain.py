"""Forking a run from its log, against real steps: the trainer (tiny model, real broker) trains run RUN's
three groups in three steps, stopped after the first and resumed, keeping every version's weights.

- Its settings are on its log: one ``TrainerSettings`` record per start, saying from which step they
  trained, each the trainer's resolved section without its secrets.
- `cua-stream retrain` with nothing changed trains the same steps bit for bit: after every step the new
  run's weights equal the run's, each step's loss and grad norm equal its record (torch, CPU).
- With a setting changed, from a later version, its steps differ, marked a retrain of RUN with the change.
- Killed with SIGKILL at moments chosen by what it had done (its plan shown, a step checkpointed) and run
  again, it ends with every step once and the same weights as the run.
- `cua-stream runs compare` shows them side by side: per step and run, the figures (the same where
  nothing changed), what each changed, a chart image, JSON.
- With ``--rejudge`` a setting that decides which samples a step holds may change: a group it drops is
  left out of its step, listed there and on the log.
- Bad input: one line, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest
import torch
import typer
from safetensors.torch import load_file
from typer.testing import CliRunner

from consumers.trainer.checkpoint import weights_name
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from consumers.trainer.retrain.settings import public_settings
from cua_stream.bus.codec import Delivery
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.cli.retrain import retrain
from cua_stream.cli.runs import app as runs_app
from cua_stream.config import BusConfig, Secret
from cua_stream.events import GroupDropped, ScoreEvent, SummaryEvent, TrainerSettings, TrainStep
from cua_stream.topics import SCORES, SUMMARIES, TRAIN_STEPS, TURNS
from tests.conftest import _create_topics, wait_until
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_inspect_step import RUN, episode

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]

GROUPS = 3


async def publish(bus: BusConfig) -> None:
    """Three groups of two episodes (group 0's first episode retries a call and compacts)."""
    async with EventProducer(bus) as producer:
        for group in range(GROUPS):
            for index in range(2):
                for event in episode(group, index):
                    topic = SCORES if isinstance(event, ScoreEvent) else TURNS
                    await producer.send(SUMMARIES if isinstance(event, SummaryEvent) else topic, event)
        await producer.flush()


def run_config(bus: BusConfig, model: Path, home: Path, **extra: object) -> TrainerConfig:
    return TrainerConfig(
        run_id=RUN, model_path=str(model), group_size=2, groups_per_step=1, max_staleness=1000, lr=1e-2,
        keep_versions=GROUPS, checkpoint_dir=str(home / "ckpt"), blob_dir=str(home / "blobs"), bus=bus,
        engine_api_key=Secret("sekrit-engine-key"), **extra,  # type: ignore[arg-type]
    )  # fmt: skip  # lr: each version far from the last, so a step trained from the wrong one shows


async def records(bus: BusConfig, run: str) -> tuple[list[TrainStep], list[TrainerSettings]]:
    events = [d.event async for d in scan(bus, TRAIN_STEPS) if d.event.run_id == run]
    steps = sorted((e for e in events if isinstance(e, TrainStep)), key=lambda s: s.step)
    return steps, [e for e in events if isinstance(e, TrainerSettings)]


@dataclass(frozen=True)
class Run:
    bus: BusConfig
    config: TrainerConfig
    steps: list[TrainStep]
    settings: list[TrainerSettings]
    home: Path


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    bus = BusConfig(
        bootstrap_servers=kafka_bootstrap, topic_prefix=f"t-{uuid.uuid4().hex[:10]}", episode_partitions=2
    )
    anyio.run(_create_topics, bus)
    anyio.run(publish, bus)
    home = tmp_path_factory.mktemp("run")

    async def train() -> None:
        with anyio.fail_after(300):
            await Trainer(run_config(bus, tiny_model_dir, home, max_steps=1)).run()
            await Trainer(run_config(bus, tiny_model_dir, home, max_steps=GROUPS)).run()  # resumed

    anyio.run(train)
    steps, settings = anyio.run(records, bus, RUN)
    assert [s.step for s in steps] == [1, 2, 3]
    return Run(bus, run_config(bus, tiny_model_dir, home, max_steps=GROUPS), steps, settings, home)


def test_a_run_publishes_its_settings_at_each_start_without_its_secrets(run: Run) -> None:
    assert [s.step for s in run.settings] == [0, 1]  # started, then resumed after step 1
    first, resumed = run.settings
    assert resumed.settings == public_settings(run.config) and resumed.retrain_of == ""
    assert first.settings == {**public_settings(run.config), "max_steps": 1}
    assert "engine_api_key" not in resumed.settings and "sekrit" not in msgspec.json.encode(resumed).decode()
    assert all(s.retrain_of == "" for s in run.steps)


def weights(directory: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}


def same_weights(a: Path, b: Path) -> bool:
    mine, theirs = weights(a), weights(b)
    return bool(mine) and mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def where(run: Run) -> list[str]:
    return ["--bootstrap", run.bus.bootstrap_servers, "--prefix", run.bus.topic_prefix]


def invoke(run: Run, *args: str) -> tuple[int, str]:
    app = typer.Typer()
    app.command()(retrain)
    done = CliRunner().invoke(app, [*args, *where(run)])
    return done.exit_code, done.output


@dataclass(frozen=True)
class Retrains:
    """Two retrains of RUN: ``same`` with nothing changed, ``kl`` with ``kl_coef`` 0.3 from step 2 (v1);
    each command's output and checkpoint directory (``kl_plan``: its ``--dry-run``'s output)."""

    same: str
    same_home: Path
    kl_plan: str
    kl_plan_left: tuple[list[TrainStep], list[TrainerSettings]]
    kl: str
    kl_home: Path


@pytest.fixture(scope="module")
def retrains(run: Run, tmp_path_factory: pytest.TempPathFactory) -> Retrains:
    home = tmp_path_factory.mktemp("retrains")
    code, same = invoke(run, "--from", RUN, "--run-id", f"{RUN}-same", "--checkpoint-dir", str(home / "same"))
    assert code == 0, same
    args = ["--from", RUN, "--run-id", f"{RUN}-kl", "--steps", "2..3", "--set", "trainer.kl_coef=0.3"]
    args += ["--checkpoint-dir", str(home / "kl")]
    code, plan = invoke(run, *args, "--dry-run")
    assert code == 0, plan
    left = anyio.run(records, run.bus, f"{RUN}-kl")
    code, kl = invoke(run, *args)
    assert code == 0, kl
    print(same, plan, kl, sep="\n")  # shown with -s: what a person sees
    return Retrains(same, home / "same", plan, left, kl, home / "kl")


def test_a_retrain_with_nothing_changed_is_the_run_bit_for_bit(run: Run, retrains: Retrains) -> None:
    output, home = retrains.same, retrains.same_home
    assert "none changed" in output and "steps 1..3 (3 steps, 3 groups)" in output, output
    for k in (1, 2, 3):  # each step shown beside its record: the same bits
        assert f"step {k}: loss " in output and "grad_norm " in output
    assert output.count(f"(= {RUN})") == 3 * 5, output  # loss, kl, clip_fraction, grad_norm, logprob_gap
    steps, settings = anyio.run(records, run.bus, f"{RUN}-same")
    assert [s.step for s in steps] == [1, 2, 3] and all(s.retrain_of == RUN for s in steps)
    for mine, theirs in zip(steps, run.steps, strict=True):
        assert mine.group_ids == theirs.group_ids and mine.attempts == theirs.attempts
        assert mine.loss == theirs.loss and mine.loss != 0
        assert mine.metrics["grad_norm"] == theirs.metrics["grad_norm"] > 0
        assert same_weights(home / weights_name(mine.step), run.home / "ckpt" / weights_name(theirs.step))
    assert not same_weights(home / weights_name(2), run.home / "ckpt" / weights_name(3))  # told apart
    (record,) = settings
    assert record.retrain_of == RUN and record.changed == {} and record.step == 0


def test_a_changed_setting_from_a_later_version_changes_its_steps_and_is_marked(
    run: Run, retrains: Retrains
) -> None:
    plan = retrains.kl_plan
    assert "trainer.kl_coef  0.0 → 0.3" in plan and f"from {RUN}'s v1" in plan, plan
    assert "the optimizer starts afresh" in plan and retrains.kl_plan_left == ([], [])  # a dry run
    steps, (record,) = anyio.run(records, run.bus, f"{RUN}-kl")
    assert [s.step for s in steps] == [2, 3] and all(s.retrain_of == RUN for s in steps)
    assert record.retrain_of == RUN and record.changed == {"kl_coef": 0.3} and record.step == 1
    assert record.settings["kl_coef"] == 0.3 and record.settings["lr"] == run.config.lr
    for mine, theirs in zip(steps, run.steps[1:], strict=True):
        assert mine.group_ids == theirs.group_ids
        assert mine.metrics["kl"] > 0 == theirs.metrics["kl"] and mine.loss != theirs.loss
    assert not same_weights(retrains.kl_home / weights_name(3), run.home / "ckpt" / weights_name(3))


def test_runs_compare_shows_a_run_and_its_retrains_side_by_side(
    run: Run, retrains: Retrains, tmp_path: Path
) -> None:
    app = typer.Typer()
    app.add_typer(runs_app, name="runs")
    runs = [RUN, f"{RUN}-same", f"{RUN}-kl"]
    chart = tmp_path / "compare.png"
    done = CliRunner().invoke(app, ["runs", "compare", *runs, "--chart", str(chart), *where(run)])
    assert done.exit_code == 0, done.output
    print(done.output)
    lines = done.output.splitlines()
    assert lines[:3] == [
        f"{RUN}: trained live, steps 1..3 (the baseline)",
        f"{RUN}-same: a retrain of {RUN}, steps 1..3; changed: no setting",
        f"{RUN}-kl: a retrain of {RUN}, steps 2..3; changed: kl_coef 0.3",
    ]
    rows = [line.split() for line in lines[4:] if line and line.split()[0].isdigit()]
    assert [(r[0], r[1]) for r in rows] == [(str(k), name) for k in (1, 2, 3) for name in runs]
    by = {(r[0], r[1]): r[2:] for r in rows}
    assert by[("1", f"{RUN}-kl")] == ["-"] * 5  # it has no step 1
    for k in ("1", "2", "3"):  # the same run bit for bit: the same figures
        assert by[(k, RUN)] == by[(k, f"{RUN}-same")]
    assert by[("2", RUN)][0] != by[("2", f"{RUN}-kl")][0]  # its loss
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000

    document = json.loads(
        CliRunner().invoke(app, ["runs", "compare", RUN, f"{RUN}-kl", "--json", *where(run)]).stdout
    )
    kl = document["runs"][1]
    assert (
        kl["retrain_of"] == RUN
        and kl["changed"] == {"kl_coef": 0.3}
        and [s["step"] for s in kl["steps"]] == [2, 3]
    )
    assert kl["steps"][0]["loss"] == next(
        s.loss for s in anyio.run(records, run.bus, f"{RUN}-kl")[0] if s.step == 2
    )
    missing = CliRunner().invoke(app, ["runs", "compare", RUN, "nobody", *where(run)])
    assert missing.exit_code == 2 and "run 'nobody' has no step to compare" in missing.output


def test_a_rejudged_retrain_leaves_out_the_groups_its_rules_drop_and_says_which(
    run: Run, tmp_path: Path
) -> None:
    """Every recorded group was sampled at v0: with a staleness bound of 1, step 3 (from v2) may not
    train its group. Without ``--rejudge`` the setting is refused (above); with it, the step goes on
    without the group, lists it, and its drop is on the log with the reason."""
    new, home = f"{RUN}-bound1", tmp_path / "new"
    args = ["--from", RUN, "--run-id", new, "--rejudge", "--set", "trainer.max_staleness=1"]
    code, output = invoke(run, *args, "--checkpoint-dir", str(home))
    assert code == 0, output
    print(output)
    (late,) = run.steps[2].group_ids
    assert f"left out: {late}" in next(line for line in output.splitlines() if line.startswith("step 3:"))
    steps, (record,) = anyio.run(records, run.bus, new)
    assert [(s.step, s.group_ids) for s in steps] == [
        (1, run.steps[0].group_ids),
        (2, run.steps[1].group_ids),
        (3, ()),
    ]
    assert [s.loss for s in steps[:2]] == [s.loss for s in run.steps[:2]] and steps[2].n_groups == 0
    assert record.changed == {"max_staleness": 1} and record.settings["rejudge"] is True
    assert same_weights(home / weights_name(3), home / weights_name(2))  # a step with no group moves nothing
    drops = [
        d.event
        for d in anyio.run(scan_all, run.bus)
        if isinstance(d.event, GroupDropped) and d.event.run_id == new
    ]
    assert [(d.group_id, d.reason) for d in drops] == [(late, "stale")]


async def scan_all(bus: BusConfig) -> list[Delivery]:
    return [d async for d in scan(bus, TRAIN_STEPS)]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--from", "nobody", "--run-id", "x"], "holds no step of run 'nobody'"),
        (["--from", RUN, "--run-id", "x", "--steps", "2..9"], f"run '{RUN}' has no step 4 on "),
        (["--from", RUN, "--run-id", "x", "--steps", "3..2"], "--steps: '3..2' is no range of steps"),
        (
            ["--from", RUN, "--run-id", "x", "--set", "trainer.kl_cof=1"],
            "no such trainer setting; closest: trainer.kl_coef",
        ),
        (
            ["--from", RUN, "--run-id", "x", "--set", "trainer.max_staleness=4"],
            "trainer.max_staleness: it decides which samples a step holds",
        ),
        (
            ["--from", RUN, "--run-id", "x", "--set", "trainer.tasks=[]"],
            "trainer.tasks: not a retrain's to change",
        ),
        (["--from", RUN, "--run-id", "x", "--set", "kl_coef=1"], "expected trainer.KEY=VALUE"),
        (
            ["--from", RUN, "--run-id", "x", "--set", "trainer.kl_coef=abc"],
            "trainer.kl_coef: Expected `float`",
        ),
        (["--from", RUN, "--run-id", "x", "--set", "trainer.passes=0"], "trainer.passes: must be >= 1"),
        (["--from", RUN, "--run-id", RUN], "is this trainer's own run"),
        (["--from", RUN, "--run-id", "x", "--start", "v9"], f"--start v9: {RUN}'s v9 weights are not in"),
        (["--from", RUN, "--run-id", "x", "--start", "/nowhere"], "--start /nowhere: not vN"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run: Run, tmp_path: Path, args: list[str], expected: str) -> None:
    code, output = invoke(run, *args, "--checkpoint-dir", str(tmp_path / "x"), "--dry-run")
    assert code == 2 and expected in output and len(output.strip().splitlines()) == 1, output


def test_a_run_id_already_taken_is_refused(run: Run, retrains: Retrains, tmp_path: Path) -> None:
    code, output = invoke(run, "--from", RUN, "--run-id", f"{RUN}-same", "--checkpoint-dir", str(tmp_path))
    assert code == 2 and "holds that run's" in output and "give the retrain a new id" in output, output


def checkpointed_step(directory: Path) -> int:
    try:
        return int(json.loads((directory / "checkpoint.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def test_kill_9_at_any_moment_loses_no_step_and_trains_none_twice(run: Run, tmp_path: Path) -> None:
    new, home = f"{RUN}-killed", tmp_path / "new"
    cmd = [sys.executable, "-m", "cua_stream", "retrain", "--from", RUN, "--run-id", new]
    cmd += ["--checkpoint-dir", str(home), *where(run)]
    kills = []
    for after in ("plan", 1, 2):  # its plan shown (before any step), then steps 1 and 2 checkpointed
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as p:
            assert p.stdout is not None
            if after == "plan":
                assert p.stdout.readline().startswith(f"retrain of {RUN} as {new}")
            else:
                wait_for(lambda at=after: checkpointed_step(home) >= at or p.poll() is not None)
            p.send_signal(signal.SIGKILL)
            p.wait()
        kills.append((after, checkpointed_step(home)))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(at < 3 for _, at in kills), kills  # every kill landed before the last step's commit
    steps, settings = anyio.run(records, run.bus, new)
    assert Counter(s.step for s in steps) == {1: 1, 2: 1, 3: 1}, (
        kills
    )  # each step once: none lost, none twice
    for mine, theirs in zip(sorted(steps, key=lambda s: s.step), run.steps, strict=True):
        assert (mine.loss, mine.metrics["grad_norm"]) == (theirs.loss, theirs.metrics["grad_norm"]), kills
    assert same_weights(home / weights_name(3), run.home / "ckpt" / weights_name(3)), kills
    assert len(settings) >= 2 and settings[0].step == 0, (
        kills
    )  # the started ones said so (plan kills may not)
    assert [s.step for s in settings] == sorted(s.step for s in settings)


def wait_for(condition: Callable[[], bool], timeout_s: float = 300) -> None:
    """Until ``condition`` (a file another process writes) holds; the bound only fails the test."""

    async def wait() -> None:
        async def done() -> bool:
            return condition()

        with anyio.fail_after(timeout_s):
            await wait_until(done, poll_s=0.02)

    anyio.run(wait)
