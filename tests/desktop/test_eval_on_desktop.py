"""`cua-stream eval` on the local desktop, where the tasks' verifiers judge: the oracle solves every
episode, the idle policy (moving the mouse until the turn limit) none, and the comparison calls the
difference significant (4/4 against 0/4: Newcombe's interval [-1.00, -0.31])."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.integration.test_eval import cli

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.harbor,
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]


def test_eval_tells_the_oracle_from_the_idle_policy(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_TOPIC_PREFIX": f"t-{uuid.uuid4().hex[:10]}"}
    rewards = {}
    for policy in ("oracle", "idle"):
        run = cli(
            "eval", "run", "--policy", policy, "--tasks", "click-test,click-button", "-k", "2", "--seeds", "1",
            "--environment", "local-desktop", "--turns", "6", "--out", str(tmp_path / f"{policy}.json"),
            "--bootstrap", kafka_bootstrap, "--engine-port", str(free_port()), "--gateway-port",
            str(free_port()), "--policies-port", str(free_port()), env=env,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        episodes = json.loads((tmp_path / f"{policy}.json").read_text())["episodes"]
        rewards[policy] = sorted((e["task"], e["verdict"], e["reward"]) for e in episodes)
    assert rewards["oracle"] == [(t, "reward", 1.0) for t in ("click-button",) * 2 + ("click-test",) * 2]
    assert rewards["idle"] == [(t, "reward", 0.0) for t in ("click-button",) * 2 + ("click-test",) * 2]
    compared = cli("eval", "compare", str(tmp_path / "oracle.json"), str(tmp_path / "idle.json"), env=env)
    overall = next(line for line in compared.stdout.splitlines() if "overall" in line)
    assert "[-1.00, -0.31]" in overall and "yes" in overall, compared.stdout
