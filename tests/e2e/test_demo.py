"""The README's main job, end to end: `cua-stream demo` with its defaults — the whole loop on its own
broker, engine, gateway, producer (Harbor trials on the local desktop, bundled tasks), scorer and trainer."""

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
]


def test_demo_trains_grpo_steps_on_real_episodes_through_every_daemon(tmp_path: Path) -> None:
    port = broker_port()
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(port)}
    # The README's command with its defaults; only ports and the state directory are this test's own.
    cmd = [sys.executable, "-m", "cua_stream", "demo"]
    cmd += ["--engine-port", str(free_port()), "--gateway-port", str(free_port()), "--no-keep-broker"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    # 3 steps of one group of 2 episodes; each episode a Harbor trial whose every call the tap printed
    outcomes = [x for x in lines if " outcome ep=" in x]
    assert len(outcomes) >= 6
    for task in ("cua/click-button", "cua/fill-form", "cua/read-value"):
        assert sum(f"task={task}" in x for x in outcomes) >= 2, task
    turns = [x for x in lines if " turn ep=" in x]
    assert sum(" images=1 " in x for x in turns) >= 6  # each episode's first call shows its desktop
    assert sum(" score ep=" in x for x in lines) >= 6
    for n in (1, 2, 3):  # each step trained and its weights went live
        assert any(x.lstrip().startswith(f"step {n}: v{n}, 1 group(s), 2 episodes") for x in lines), n
    versions = [x for x in lines if " policy_version v=" in x]  # the tap shows each version as it lands
    assert [v.split(" v=")[1].split()[0] for v in versions] == ["1", "2", "3"]
    assert "the engine serves v3" in res.stdout  # the summary: weights reached the engine
    assert "episodes trained: 6" in res.stdout
    assert len(list((tmp_path / "home").rglob("demo-trials/*/result.json"))) >= 6  # Harbor's records
    assert (tmp_path / "home" / "trainer").is_dir()
    assert "Traceback" not in res.stderr and " DEBUG " not in res.stderr
