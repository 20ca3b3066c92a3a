"""The README's main job, end to end: `cua-stream demo` on its own broker, engine, gateway and scorer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import broker_port, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]


def test_demo_runs_groups_through_every_daemon(tmp_path: Path) -> None:
    port = broker_port()
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(port)}
    # The README's command with its defaults; only ports and the state directory are this test's own.
    cmd = [sys.executable, "-m", "cua_stream", "demo"]
    cmd += ["--engine-port", str(free_port()), "--gateway-port", str(free_port()), "--no-keep-broker"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    # every stage printed its events through the tap: 2 groups x 3 episodes, up to 3 turns each
    assert sum(" turn ep=" in x for x in lines) >= 8
    assert sum(" outcome ep=" in x for x in lines) == 6
    scores = [x for x in lines if " score ep=" in x]
    assert len(scores) == 6
    assert sum("DISCARD sandbox_lost" in x for x in scores) == 1
    # a reply cut at the token cap ends its episode with reward 0, never a 409 and a crash
    assert sum("(token_cap)" in x for x in scores) >= 1 and sum("(ok)" in x for x in scores) >= 3
    assert "discard: sandbox_lost" in res.stdout and "token_cap" in res.stdout  # the summary table
    assert "Traceback" not in res.stderr
