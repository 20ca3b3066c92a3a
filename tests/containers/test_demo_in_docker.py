"""`cua-stream demo --environment docker`: the whole loop with every episode a Harbor trial in Harbor's
docker environment (the bundled tasks' images, cua-stream's private daemon), GRPO steps trained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cua_stream.containers.dockerd import DockerHome
from producers.environments import OWNER
from tests.conftest import broker_port, free_port
from tests.containers.conftest import containers

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.containers]


def test_the_demo_trains_grpo_steps_on_episodes_in_docker(docker_engine: DockerHome, tmp_path: Path) -> None:
    port = broker_port()
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(port),
                        "CUA_DOCKER_HOME": str(docker_engine.root)}  # fmt: skip
    cmd = [sys.executable, "-m", "cua_stream", "demo", "--environment", "docker", "--steps", "2"]
    cmd += ["--engine-port", str(free_port()), "--gateway-port", str(free_port()), "--no-keep-broker"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert "Docker containers" in res.stdout and "image cua-tasks:local: up to date" in res.stdout
    outcomes = [x for x in lines if " outcome ep=" in x]
    assert len(outcomes) >= 4
    turns = [x for x in lines if " turn ep=" in x]
    assert (
        sum(" images=1 " in x for x in turns) >= 4
    )  # each episode's first call shows its container's screen
    for n in (1, 2):
        assert any(x.lstrip().startswith(f"step {n}: v{n}, 1 group(s), 2 episodes") for x in lines), n
    assert "episodes trained: 4" in res.stdout
    assert len(list((tmp_path / "home").rglob("demo-trials/*/result.json"))) >= 4
    assert not containers(OWNER)  # every episode's container went with its trial
    assert "Traceback" not in res.stderr
