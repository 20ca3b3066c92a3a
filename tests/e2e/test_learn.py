"""`cua-stream learn` end to end on a small budget: every phase runs on the real path (base evaluation and
oracle demonstrations as Harbor trials on the local desktop through the gateway, SFT, GRPO steps through
the producer, gateway, engine, scorer and trainer) and the curve is written. Whether the policy learns is
`test_learning.py`'s and the benchmark's question; this one checks the pipeline a user runs."""

from __future__ import annotations

import json
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
    pytest.mark.timeout(900),
]


def test_learn_runs_every_phase_and_writes_its_curve(tmp_path: Path) -> None:
    env = os.environ | {
        "CUA_HOME": str(tmp_path / "home"),
        "CUA_BROKER_PORT": str(broker_port()),
        "COLUMNS": "200",
    }
    cmd = [sys.executable, "-m", "cua_stream", "learn", "--demos", "2", "--eval-episodes", "1", "--sft-epochs", "2",
           "--steps", "2", "--group-size", "2", "--groups-per-step", "1",
           # probed after both epochs (from any NLL), never enough: SFT runs its 2 epochs
           "--sft-probe-nll", "100", "--sft-start-success", "1", "--probe-episodes", "1", "--engine-port", str(free_port()),
           "--gateway-port", str(free_port()), "--policies-port", str(free_port())]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=840, env=env)
    finally:
        subprocess.run([sys.executable, "-m", "cua_stream", "broker", "stop"], env=env, capture_output=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    said = " ".join(res.stdout.split())
    assert "base policy success: click-test 0%; oracle demonstrations rewarded: click-test 100%" in said
    assert "demonstration token NLL" in said and "after 2 epochs (the last epoch)" in said
    assert "epoch 1: 0% of 1 sampled episodes succeed" in said and "epoch 2: 0% of 1" in said
    assert (
        "(sampling at temperature 1, min_p 0.1; lr 0.0003 (ramped up over the first 10 steps), the episodes above their group's mean reinforced, "
        "the others not pushed down, KL 0.3 to the SFT weights)" in said
    )
    assert "step 2: v2, 1 group(s), 2 episodes" in said
    assert "over 2 steps" in said and "where the time went: evaluation and demonstrations" in said
    assert "replies carrying a valid action:" in said
    (run,) = (tmp_path / "home" / "learn").iterdir()
    curve = json.loads((run / "curve.json").read_text())
    assert curve["steps"] == [1, 2] and set(curve["by_task"]) == {"click-test"}
    assert len(curve["valid_actions"]) == 2 and all(0 <= v <= 1 for v in curve["valid_actions"])
    assert curve["base"] == {"click-test": 0.0}  # a random policy solves nothing
    assert set(curve["timings_s"]) >= {"SFT", "GRPO", "train_s", "total_s"}
    assert [(p["epoch"], p["success"]) for p in curve["sft_probes"]] == [(1, 0.0), (2, 0.0)]
    assert (run / "curve.png").stat().st_size > 10_000
    assert (run / "sft" / "model.safetensors").exists() and (run / "sft" / "tokenizer.json").exists()
    assert "Traceback" not in res.stderr
