"""`cua-stream eval` through the real stack: the scripted policies server, the engine and the gateway as
child processes, the in-process producer (scripted environment) and scorer over the real broker; the
numbers printed and written are checked against hand computations, and two runs compared.

The scripted environment has no verifier: its reward is the share of the episode's replies that ended
cleanly, so any scripted policy scores 1 there (the tasks' verdicts need the local desktop:
tests/desktop/test_eval_on_desktop.py). The failing run here is one whose replies the gateway refuses
(a reply cap below the policy's replies): every episode scored 0, with the gateway's status as reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.evaluation.plan import EVAL_SEED_BASE
from cua_stream.events import EvalReport, PolicyVersion
from cua_stream.tasks import BUNDLED_DIR
from cua_stream.topics import EVAL_WORK, EVALS, OUTCOMES, POLICY, WORK, TopicSpec
from tests.conftest import free_port

TASKS = "click-button,read-value"


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cua_stream", *args], capture_output=True, text=True, timeout=300, env=env
    )


async def read_all(bus: BusConfig, spec: TopicSpec) -> list[EvalReport]:
    return [d.event async for d in scan(bus, spec)]  # type: ignore[misc]


def evaluate(
    policy: str, out: Path, bootstrap: str, env: dict[str, str], *extra: str, tasks: str = TASKS
) -> dict:
    run = cli(
        "eval", "run", "--policy", policy, "--tasks", tasks, "-k", "2", "--seeds", "1", "--environment", "scripted",
        "--turns", "2", "--run-id", f"eval-{policy}-{uuid.uuid4().hex[:6]}", "--out", str(out),
        "--bootstrap", bootstrap, "--engine-port", str(free_port()), "--gateway-port", str(free_port()),
        "--policies-port", str(free_port()), *extra, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {"stdout": run.stdout, "results": json.loads(out.read_text())}


@pytest.mark.kafka
@pytest.mark.model
@pytest.mark.harbor
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_eval_runs_the_scripted_policies_and_compares_them(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_TOPIC_PREFIX": prefix}

    # one task by name, one as a Harbor task directory of the user's (a copy of a bundled one): the
    # command's own producer runs the directory its --tasks named (its task roots), outside the bundled
    mine = tmp_path / "my-tasks" / "read-value"
    shutil.copytree(BUNDLED_DIR / "read-value", mine)
    good = evaluate("oracle", tmp_path / "oracle.json", kafka_bootstrap, env, tasks=f"click-button,{mine}")
    episodes = good["results"]["episodes"]
    assert sorted((e["task"], e["sample"]) for e in episodes) == [
        ("click-button", 0), ("click-button", 1), ("read-value", 0), ("read-value", 1),
    ]  # fmt: skip
    assert {e["seed"] for e in episodes} == {EVAL_SEED_BASE}  # the first evaluation layout
    assert all(e["verdict"] == "reward" and e["reward"] == 1.0 and e["reason"] == "ok" for e in episodes)
    assert all(e["turns"] == 2 and 0 < e["seconds"] < 120 for e in episodes)
    # per task 2/2: Wilson [0.34, 1.00]; overall 4/4: [0.51, 1.00]; pass@1 = pass@2 = 1
    table = good["stdout"]
    assert table.count("1.00 (2/2)") == 2 and table.count("[0.34, 1.00]") == 2, table
    assert "1.00 (4/4)" in table and "[0.51, 1.00]" in table, table

    bad = evaluate("idle", tmp_path / "idle.json", kafka_bootstrap, env, "--max-new-tokens", "8")
    episodes = bad["results"]["episodes"]
    assert len(episodes) == 4
    assert all(e["verdict"] == "reward" and e["reward"] == 0.0 for e in episodes), episodes
    assert {e["reason"] for e in episodes} == {"server_status:400"}  # the gateway refused each reply
    # overall 0/4: Wilson [0, z^2 / (4 + z^2)] = [0.00, 0.49]
    assert "0.00 (0/4)" in bad["stdout"] and "[0.00, 0.49]" in bad["stdout"], bad["stdout"]
    assert "server_status:400" in bad["stdout"], bad["stdout"]  # the reason, in "other verdicts"

    # each evaluation's results, per task and overall, on the evals topic (the dashboard's eval panel)
    bus = BusConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix)
    reports = {r.run_id: r for r in anyio.run(read_all, bus, EVALS)}
    assert set(reports) == {good["results"]["run_id"], bad["results"]["run_id"]}
    oracle, idle = reports[good["results"]["run_id"]], reports[bad["results"]["run_id"]]
    assert [t.task for t in oracle.tasks] == ["click-button", "read-value", "overall"]
    overall = {r.policy: (r.tasks[-1].successes, r.tasks[-1].scored) for r in (oracle, idle)}
    assert overall == {"oracle": (4, 4), "idle": (0, 4)}
    assert round(oracle.tasks[-1].low, 2) == 0.51 and round(idle.tasks[-1].high, 2) == 0.49
    assert oracle.tasks[0].pass_at == {1: 1.0, 2: 1.0} and oracle.samples == 2 and oracle.layouts == 1

    compared = cli("eval", "compare", str(tmp_path / "oracle.json"), str(tmp_path / "idle.json"), env=env)
    assert compared.returncode == 0, compared.stderr
    # B - A = -1, Newcombe's interval [-1, -1 + sqrt(2) * u] with u the upper Wilson end of 0/n:
    # overall (n = 4, u = 0.49) [-1.00, -0.31]; per task (n = 2, u = 0.66) [-1.00, -0.07]
    rows = {line.split("│")[1].strip(): line for line in compared.stdout.splitlines() if line.count("│") > 5}
    assert set(rows) == {"click-button", "read-value", "overall"}, compared.stdout
    assert "-1.00" in rows["overall"] and "[-1.00, -0.31]" in rows["overall"] and "yes" in rows["overall"]
    assert "[-1.00, -0.07]" in rows["click-button"] and "yes" in rows["click-button"], compared.stdout


def test_a_directory_that_is_not_a_task_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-task").mkdir()
    run = cli(
        "eval",
        "run",
        "--policy",
        "oracle",
        "--tasks",
        f"click-test,{tmp_path / 'not-a-task'}",
        env=os.environ | {"COLUMNS": "300"},
    )
    assert run.returncode == 2
    assert (
        "Invalid value for --tasks" in run.stderr
        and "not-a-task is a directory without a task.toml" in run.stderr
    )


async def published_versions(bus: BusConfig, *versions: PolicyVersion) -> None:
    async with EventProducer(bus) as producer:
        for v in versions:
            await producer.publish(POLICY, v)


def page_when(port: int, line: str, process: subprocess.Popen[str]) -> str:
    """The metrics page on ``port`` once it holds ``line`` (bounded; fails early if the process ends)."""
    import httpx

    page = ""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx.TransportError):  # not listening yet
            page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        if line in page:
            return page
        time.sleep(0.5)
    raise AssertionError(f"no {line!r} on the page (process ended: {process.poll()}):\n{page}")


async def records_of(bus: BusConfig, spec: TopicSpec, run_prefix: str) -> list:
    return [d.event async for d in scan(bus, spec) if d.event.run_id.startswith(run_prefix)]


@pytest.mark.kafka
@pytest.mark.model
@pytest.mark.harbor
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_following_a_run_evaluates_its_versions_once_each_across_restarts(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``--follow``: each published version of a training run is loaded on the evaluation's own engine and
    evaluated; a restart skips the versions done (and a re-run of one evaluation issues no episode again)."""
    from cua_stream.app.demo import tiny_model_dir

    prefix = f"t-{uuid.uuid4().hex[:10]}"
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_TOPIC_PREFIX": prefix}
    bus = BusConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix)
    weights = str(tiny_model_dir())  # every version's weights: the tiny model (what is loaded is not judged)
    v1, v2 = (PolicyVersion(run_id="train-f", version=v, weights_path=weights, step=v, published_at=time.time())
              for v in (1, 2))  # fmt: skip

    def follow_args(until: int, engine_port: int = 0, gateway_port: int = 0) -> list[str]:
        return [
            "eval", "follow", "train-f", "--model-path", weights, "--until-version", str(until),
            "--tasks", "click-button", "-k", "1", "--seeds", "1", "--environment", "scripted", "--turns", "1",
            "--out", str(tmp_path / "follow"), "--bootstrap", kafka_bootstrap,
            "--engine-port", str(engine_port or free_port()), "--gateway-port", str(gateway_port or free_port()),
        ]  # fmt: skip

    def follow(until: int) -> subprocess.CompletedProcess[str]:
        return cli(*follow_args(until), env=env)

    first = cli("topics", "create", "--bootstrap", kafka_bootstrap, env=env)
    assert first.returncode == 0, first.stderr
    anyio.run(published_versions, bus, v1)
    run = follow(until=1)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "versions already evaluated" not in run.stdout and run.stdout.count("Results published") == 1
    anyio.run(published_versions, bus, v2)

    # started again, following up to v4 (v1 done: v2 is evaluated, then it waits), with its metrics page,
    # read over HTTP while it waits; v3 is published, evaluated, and its lag is on the page; v4 ends it
    port = free_port()
    command = [sys.executable, "-m", "cua_stream", *follow_args(4), "--metrics-port", str(port)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as again:
        try:
            waiting = page_when(port, 'cua_eval_evaluated_version{of_run="train-f"} 2', again)
            v3, v4 = (PolicyVersion(run_id="train-f", version=v, weights_path=weights, step=v,
                                    published_at=time.time()) for v in (3, 4))  # fmt: skip
            anyio.run(published_versions, bus, v3)
            page = page_when(port, 'cua_eval_versions_total{of_run="train-f"} 2', again)
            anyio.run(published_versions, bus, v4)
            stdout, stderr = again.communicate(timeout=300)  # it ends by itself at v4
        finally:
            if again.poll() is None:
                again.kill()
                again.communicate()
    assert again.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert 'cua_eval_published_version{of_run="train-f"} 2' in waiting, stdout[-3000:] + stderr[-3000:]
    assert 'cua_eval_versions_total{of_run="train-f"} 1\n' in waiting  # v2 only: v1 was not evaluated again
    assert (
        "versions already evaluated by eval-train-f: v1\n" in stdout
        and stdout.count("Results published") == 3
    ), stdout[-3000:]
    assert 'cua_eval_evaluated_version{of_run="train-f"} 3' in page
    (lag,) = (
        float(line.split()[-1]) for line in page.splitlines() if line.startswith("cua_eval_lag_seconds{")
    )

    reports = anyio.run(records_of, bus, EVALS, "eval-train-f")
    assert sorted((r.run_id, r.policy_version, r.of_run) for r in reports) == [
        ("eval-train-f-v1", 1, "train-f"), ("eval-train-f-v2", 2, "train-f"), ("eval-train-f-v3", 3, "train-f"),
        ("eval-train-f-v4", 4, "train-f"),
    ]  # fmt: skip
    assert all(r.created_at >= r.version_published_at for r in reports)  # type: ignore[operator]
    (r3,) = (r for r in reports if r.policy_version == 3)
    assert lag == pytest.approx(r3.created_at - v3.published_at, abs=0.01) and lag > 0
    assert sorted(p.name for p in (tmp_path / "follow").iterdir()) == [
        "v1.json",
        "v2.json",
        "v3.json",
        "v4.json",
    ]
    work = anyio.run(records_of, bus, EVAL_WORK, "eval-train-f")
    outcomes = anyio.run(records_of, bus, OUTCOMES, "eval-train-f")
    assert len(work) == len({w.episode_id for w in work}) == 4  # one episode per version, issued once
    assert anyio.run(records_of, bus, WORK, "") == []  # none on training's work topic
    assert sorted(o.episode_id for o in outcomes) == sorted(w.episode_id for w in work)  # played once

    # an evaluation run again under its id (as after a kill) issues and plays none of its episodes again
    rerun = cli(
        "eval", "run", "--model-path", weights, "--run-id", "eval-train-f-v2", "--tasks", "click-button", "-k", "1",
        "--seeds", "1", "--environment", "scripted", "--turns", "1", "--out", str(tmp_path / "rerun.json"),
        "--bootstrap", kafka_bootstrap, "--engine-port", str(free_port()), "--gateway-port", str(free_port()),
        env=env,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]

    def ids(records: list) -> list[tuple[str, int]]:
        return sorted((r.episode_id, getattr(r, "attempt", 0)) for r in records)

    assert ids(anyio.run(records_of, bus, EVAL_WORK, "eval-train-f")) == ids(work)
    assert ids(anyio.run(records_of, bus, OUTCOMES, "eval-train-f")) == ids(outcomes)
    again_results = json.loads((tmp_path / "rerun.json").read_text())["episodes"]
    first_results = json.loads((tmp_path / "follow" / "v2.json").read_text())["episodes"]
    assert again_results == first_results  # the same episode, its verdict read back


@pytest.mark.kafka
@pytest.mark.model
@pytest.mark.harbor
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_a_follower_waiting_for_a_version_and_its_engine_and_gateway(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from cua_stream.app.demo import tiny_model_dir

    prefix = f"t-{uuid.uuid4().hex[:10]}"
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_TOPIC_PREFIX": prefix}
    created = cli("topics", "create", "--bootstrap", kafka_bootstrap, env=env)
    assert created.returncode == 0, created.stderr
    port, engine_port, gateway_port = free_port(), free_port(), free_port()
    command = [
        sys.executable, "-m", "cua_stream", "eval", "follow", "train-c", "--model-path", str(tiny_model_dir()),
        "--tasks", "click-button", "-k", "1", "--seeds", "1", "--environment", "scripted", "--turns", "1",
        "--out", str(tmp_path / "follow"), "--bootstrap", kafka_bootstrap, "--engine-port", str(engine_port),
        "--gateway-port", str(gateway_port), "--metrics-port", str(port),
    ]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as follower:
        try:
            page_when(port, "cua_eval_published_version", follower)  # its page is up: it waits for v1
            follower.send_signal(signal.SIGINT)
            _, stderr = follower.communicate(timeout=60)  # at once (measured 2 s; before the fix, never)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.communicate()
    assert follower.returncode == 130, stderr[-3000:]
    for listening in (port, engine_port, gateway_port):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", listening)) != 0, listening  # nothing left serving


@pytest.mark.kafka
@pytest.mark.model
@pytest.mark.harbor
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_following_on_the_runs_own_engine_starts_none_and_says_which_versions_served(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``--engine shared``: a version is evaluated through the run's gateway and engine (nothing started,
    no weights loaded by the evaluation), and the versions the engine served its calls at are said."""
    import httpx

    from consumers.trainer.weights import push_weights
    from cua_stream.app.demo import tiny_model_dir
    from cua_stream.app.stack import engine_and_gateway

    prefix = f"t-{uuid.uuid4().hex[:10]}"
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_TOPIC_PREFIX": prefix}
    bus = BusConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix)
    weights = tiny_model_dir()
    bad = cli("eval", "follow", "train-s", "--engine", "shared", env=env)  # whose gateway?
    assert bad.returncode == 2 and "--gateway-url: the run's gateway" in bad.stderr, bad.stderr
    assert cli("topics", "create", "--bootstrap", kafka_bootstrap, env=env).returncode == 0

    async def trainer_publishes(engine_url: str, gateway_url: str) -> None:  # as the run's trainer does
        async with httpx.AsyncClient() as http:
            await push_weights(
                http, engine_url=engine_url, gateway_url=gateway_url, weights=weights, version=1
            )
        v1 = PolicyVersion(
            run_id="train-s", version=1, weights_path=str(weights), step=1, published_at=time.time()
        )
        await published_versions(bus, v1)

    with engine_and_gateway(weights, bus, engine_port=free_port(), gateway_port=free_port(),
                            logs=tmp_path / "run-logs") as run_serving:  # fmt: skip
        anyio.run(trainer_publishes, run_serving.engine_url, run_serving.gateway_url)
        run = cli(
            "eval", "follow", "train-s", "--engine", "shared", "--gateway-url", run_serving.gateway_url,
            "--until-version", "1", "--tasks", "click-button", "-k", "1", "--seeds", "1", "--environment",
            "scripted", "--turns", "1", "--out", str(tmp_path / "shared"), "--bootstrap", kafka_bootstrap, env=env,
        )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    said = " ".join(run.stdout.split())
    assert "served by the run's engine at version(s) v1" in said and "moved on" not in said, said
    assert not (tmp_path / "home" / "eval-logs").exists()  # no engine or gateway of its own
    (report,) = anyio.run(records_of, bus, EVALS, "eval-train-s")
    assert (report.run_id, report.policy_version, report.of_run) == ("eval-train-s-v1", 1, "train-s")
    assert report.tasks[-1].episodes == 1
