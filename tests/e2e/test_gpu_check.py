"""``scripts/gpu-check.sh --dry-run``: the GPU check's every step but the GPU ones, as it will run on a GPU
host — the environments set up, SGLang's own parser given the launch flags, the loop for three steps
against an engine it did not start (the reference engine in SGLang's place), and the numbers printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import broker_port, free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]


def gpu_check(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    engine_port = free_port()
    # the gateway's own free port: the engine's + 1 was once held by another test's process (EADDRINUSE)
    gateway_port = next(port for port in iter(free_port, None) if port != engine_port)
    env = (
        os.environ
        | {
            "CUA_GPU_CHECK_HOME": str(home),
            "CUA_GPU_CHECK_PORT": str(engine_port),
            "CUA_GPU_CHECK_GATEWAY_PORT": str(gateway_port),
            "CUA_BROKER_PORT": str(broker_port()),
        }
        | env
    )
    cmd = ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)


@pytest.mark.timeout(960)
def test_the_dry_run_trains_three_steps_on_an_engine_it_did_not_start_and_prints_the_numbers(
    tmp_path: Path,
) -> None:
    done = gpu_check(tmp_path / "check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for n in range(1, 8):
        assert f"gpu-check: {n}/7" in done.stdout, n
    assert "SGLang's parser accepts its flags" in done.stdout
    assert "3 GRPO steps (megatron trainer on cpu)" in done.stdout  # megatron trains (N item 2)
    assert "logprob gap trainer-engine: max" in done.stdout and "episodes per minute:" in done.stdout
    report = json.loads((tmp_path / "check" / "report.json").read_text())
    assert [s["policy_version"] for s in report["steps"]] == [1, 2, 3]
    assert report["served_version"] in (3, "3") and report["episodes"] >= 6
    assert all(s["metrics"]["logprob_gap"] <= 0.02 for s in report["steps"])
    assert report["steps"][-1]["metrics"]["previous_push_s"] > 0  # the weight update was timed
    # the demo started no engine of its own: the one on the port served every step
    assert (
        "starting the session gateway on http://127.0.0.1:" in (tmp_path / "check/logs/demo.log").read_text()
    )
    assert "parsed:" in (tmp_path / "check/logs/sglang-args.log").read_text()


@pytest.mark.timeout(300)
def test_a_flag_sglang_does_not_know_stops_the_check_with_one_line(tmp_path: Path) -> None:
    done = gpu_check(tmp_path / "check", CUA_SGLANG_ARGS="--no-such-flag-in-sglang")
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("gpu-check: FAILED at 5/7 SGLang refuses its launch flags")
    )
    assert "no-such-flag-in-sglang" in (tmp_path / "check/logs/sglang-args.log").read_text()


def test_the_demo_against_an_engine_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(broker_port())}
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "cua_stream", "demo", "--environment", "scripted", "--engine-url", url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"--engine-url: no engine answers {url}/health" in done.stderr
    assert "Traceback" not in done.stderr
    assert "broker" not in done.stdout  # checked before anything started
