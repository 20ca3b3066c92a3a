"""The README's main job, end to end: `cua-stream demo` with its defaults, on its own broker, engine,
gateway, producer (Harbor trials on the local desktop, bundled tasks) and scorer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import broker_port, free_port

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.desktop,
    pytest.mark.skipif(os.geteuid() != 0, reason="the local desktop needs root (CI runs as root)"),
]


def test_demo_runs_groups_of_real_episodes_through_every_daemon(tmp_path: Path) -> None:
    port = broker_port()
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(port)}
    # The README's command with its defaults; only ports and the state directory are this test's own.
    cmd = [sys.executable, "-m", "cua_stream", "demo"]
    cmd += ["--engine-port", str(free_port()), "--gateway-port", str(free_port()), "--no-keep-broker"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    # 2 groups x 2 episodes of two bundled tasks, each a Harbor trial whose every call the tap printed
    outcomes = [x for x in lines if " outcome ep=" in x]
    assert len(outcomes) == 4
    assert sum("task=cua/click-button" in x for x in outcomes) == 2
    assert sum("task=cua/fill-form" in x for x in outcomes) == 2
    turns = [x for x in lines if " turn ep=" in x]
    assert len(turns) >= 4 and all("images=" in x for x in turns)
    assert sum(" images=1 " in x for x in turns) >= 4  # each episode's first call shows its desktop
    scores = [x for x in lines if " score ep=" in x]
    assert len(scores) == 4 and all("reward=0 " in x for x in scores)  # a random policy solves nothing
    assert "ended by" in res.stdout and "cua/fill-form" in res.stdout  # the summary table
    trials = list((tmp_path / "home").rglob("demo-trials/*/result.json"))
    assert len(trials) == 4  # Harbor's own record of each trial
    assert "Traceback" not in res.stderr and " DEBUG " not in res.stderr
