"""`cua-stream learn` end to end on a small budget: every phase runs on the real path (base evaluation and
oracle demonstrations as Harbor trials on the local desktop through the gateway, SFT and its probes, the
SFT policy's evaluation, GRPO steps through the producer, gateway, engine, scorer and trainer, the GRPO
policy's evaluation) and the curve is written; the evaluations are `cua-stream eval`'s (files, reports). Whether the policy learns is
`test_learning.py`'s and the benchmark's question; this one checks the pipeline a user runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.evaluation.plan import EVAL_SEED_BASE
from cua_stream.evaluation.results import load
from cua_stream.events import EvalReport
from cua_stream.identity import is_eval_run
from cua_stream.topics import EVALS
from tests.conftest import broker_port, free_port

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.desktop,
    pytest.mark.timeout(900),
]


async def eval_reports(port: int) -> list[EvalReport]:
    bus = BusConfig(bootstrap_servers=f"127.0.0.1:{port}")
    return [d.event async for d in scan(bus, EVALS) if isinstance(d.event, EvalReport)]


def test_learn_runs_every_phase_and_writes_its_curve(tmp_path: Path) -> None:
    port = broker_port()
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(port), "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "cua_stream", "learn", "--demos", "2", "--eval-episodes", "1", "--sft-epochs", "2",
           "--steps", "2", "--group-size", "2", "--groups-per-step", "1",
           # probed after both epochs (from any NLL), never enough: SFT runs its 2 epochs
           "--sft-probe-nll", "100", "--sft-start-success", "1", "--probe-episodes", "1", "--engine-port", str(free_port()),
           "--gateway-port", str(free_port()), "--policies-port", str(free_port())]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=840, env=env)
        reports = anyio.run(eval_reports, port) if res.returncode == 0 else []
    finally:
        subprocess.run([sys.executable, "-m", "cua_stream", "broker", "stop"], env=env, capture_output=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    said = " ".join(res.stdout.split())
    # a random policy solves nothing: 0 of 1, with the Wilson interval of 0/1 (by hand: [0, 0.79])
    assert (
        "base policy success: click-test 0/1 (95% CI 0.00-0.79); oracle demonstrations rewarded: click-test 100%"
        in said
    )
    assert "SFT policy success: click-test " in said and "GRPO policy success: click-test " in said
    # click-test's button always covers the page's centre: a fixed click solves every layout
    assert "blind baseline (the best fixed click, over 1000 layouts per task): click-test 1000/1000" in said
    assert "demonstration token NLL" in said and "after 2 epochs (the last epoch)" in said
    assert "epoch 1: 0% of 1 sampled episodes succeed" in said and "epoch 2: 0% of 1" in said
    assert (
        "(sampling at temperature 1, min_p 0.1; lr 0.0003 (ramped up over the first 10 steps), the episodes above their group's mean reinforced, "
        "the others not pushed down, KL 0.3 to the SFT weights)" in said
    )
    assert "step 2: v2, 1 group(s), 2 episodes" in said
    assert "over 2 steps" in said and "where the time went: evaluation and demonstrations" in said
    assert "replies carrying a valid action:" in said
    assert "a shuffled order of the same steps rises as much p=" in said
    (run,) = (tmp_path / "home" / "learn").iterdir()
    curve = json.loads((run / "curve.json").read_text())
    assert curve["steps"] == [1, 2] and set(curve["by_task"]) == {"click-test"}
    assert len(curve["valid_actions"]) == 2 and all(0 <= v <= 1 for v in curve["valid_actions"])
    # learn's window of 3 over 2 steps: both ends are the whole curve, so no rise, and every order has it
    assert curve["trend"] | {"slope": 0} == {
        "rise": 0,
        "p_rise": 1,
        "slope": 0,
        "p_slope": curve["trend"]["p_slope"],
        "thirds": [],
    }
    # the base, SFT and GRPO policies' numbers are eval's: its results files, its reports on the topic
    evaluations = curve["evaluations"]
    assert set(evaluations) == {"base", "sft", "grpo"}
    base = evaluations["base"]["by_task"]["click-test"]
    assert (base["success"], base["low"], base["successes"], base["scored"]) == (0.0, 0.0, 0, 1)
    assert base["high"] == pytest.approx(0.7935, abs=1e-4)
    for name, entry in evaluations.items():
        results = load(Path(entry["results"]))
        assert results.policy == name and results.run_id == entry["run_id"] and is_eval_run(results.run_id)
        assert [e.seed for e in results.episodes] == [EVAL_SEED_BASE]  # eval's first held-out layout
    assert {r.run_id: r.policy for r in reports} == {
        evaluations[name]["run_id"]: name for name in ("base", "sft", "grpo")
    } | {p["run_id"]: f"sft-e{p['epoch']:g}" for p in curve["sft_probes"]} | {
        f"eval-{run.name}-blind": "blind"
    }
    # the closing table: per task, the blind baseline, base, after SFT, after GRPO, each with its episodes
    # (in curve.json as the dashboard gets it, rebuilt there from the same reports)
    (printed,) = [line for line in res.stdout.splitlines() if "click-test" in line and "(1000/1000)" in line]
    cells = [c.strip() for c in printed.split("│")[2:-1]]
    stage = {name: evaluations[name]["by_task"]["click-test"] for name in ("base", "sft", "grpo")}
    assert cells == ["1.00 [1.00, 1.00] (1000/1000)", "0.00 [0.00, 0.79] (0/1)"] + [
        f"{stage[n]['success']:.2f} [{stage[n]['low']:.2f}, {stage[n]['high']:.2f}] ({stage[n]['successes']}/1)"
        for n in ("sft", "grpo")
    ]
    assert [row["task"] for row in curve["table"]] == ["click-test", "overall"]
    table = curve["table"][0]["cells"]
    assert table["blind"]["successes"] == table["blind"]["scored"] == 1000
    assert {n: (table[n]["successes"], table[n]["scored"]) for n in stage} == {
        n: (stage[n]["successes"], 1) for n in stage
    }
    compared = subprocess.run(
        [sys.executable, "-m", "cua_stream", "eval", "compare", evaluations["base"]["results"],
         evaluations["grpo"]["results"]], capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert compared.returncode == 0 and "A base vs B grpo" in compared.stdout, (
        compared.stdout + compared.stderr
    )
    assert set(curve["timings_s"]) >= {"SFT", "GRPO", "train_s", "total_s"}
    assert [(p["epoch"], p["success"]) for p in curve["sft_probes"]] == [(1, 0.0), (2, 0.0)]
    assert (run / "curve.png").stat().st_size > 10_000
    assert (run / "sft" / "model.safetensors").exists() and (run / "sft" / "tokenizer.json").exists()
    assert "Traceback" not in res.stderr
