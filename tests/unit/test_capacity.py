"""The capacity model (``cua_stream.capacity``) and ``cua-stream plan``: hand-computed deployments (gateways
bound by CPU or by memory, costs scaled by the request body and never below the measured point), the
committed costs equal to the benchmark's file, and bad input refused in one line with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cua_stream import cli
from cua_stream.capacity import MEASURED, Deployment, PerCoreCosts, load_costs, mean_body_kb, plan, render

ROOT = Path(__file__).resolve().parents[2]
COSTS = PerCoreCosts(gateway_cpu_s_per_1000_turns=2.0, gateway_mb_per_session=10.0, at_body_kb=1000)


def values(d: Deployment, costs: PerCoreCosts = COSTS) -> dict[str, float]:
    return {line.name: line.value for line in plan(d, costs)}


def test_a_deployment_computed_by_hand() -> None:
    d = Deployment(gpus=100, episodes_per_gpu=10, turns_per_episode=14, screenshot_kb=150, turn_s=5)
    assert mean_body_kb(d) == pytest.approx(150 * 4 / 3 * 15 / 2)  # 1,500 KB: costs x 1.5
    v = values(d)
    assert v["episodes in flight"] == 1000
    assert v["turns/s"] == pytest.approx(200)
    assert v["gateway CPU per turn"] == pytest.approx(3.0)  # 2 ms x 1.5
    assert v["gateway cores"] == pytest.approx(0.6)
    assert v["gateways"] == 2  # ceil(0.6 / 0.5); memory: ceil(1000 x 15 MB / 16,384 MB) = 1
    assert v["producer processes"] == 2  # ceil(1000 / 512)
    assert v["bus write"] == pytest.approx(200 * 4 / 1024)
    assert v["turn-topic partitions"] == 1
    assert v["brokers"] == 3
    assert v["object-store write"] == pytest.approx(200 * 150 / 1024)
    assert v["object-store read"] == v["object-store write"]


def test_gateways_bound_by_memory_and_a_large_bus() -> None:
    heavy = PerCoreCosts(gateway_cpu_s_per_1000_turns=0.1, gateway_mb_per_session=1000, at_body_kb=1000)
    d = Deployment(gpus=100, episodes_per_gpu=10, turns_per_episode=14, screenshot_kb=150, turn_s=5)
    assert values(d, heavy)["gateways"] == 92  # ceil(1000 x 1,500 MB / 16,384 MB) = ceil(91.55)
    many = Deployment(gpus=10_000, episodes_per_gpu=10, turns_per_episode=1, screenshot_kb=1, turn_s=1)
    v = values(many, COSTS)
    # 100,000 turns/s: bytes ceil(390.6 MB/s / 10) = 40 bind before events (100,000 / 5,000 = 20)
    assert v["turn-topic partitions"] == 40
    assert v["brokers"] == 12  # ceil(390.6 MB/s x 3 / 100)


def test_costs_are_never_scaled_below_the_measured_point() -> None:
    small = Deployment(gpus=1, episodes_per_gpu=1, turns_per_episode=1, screenshot_kb=1, turn_s=1)
    assert values(small)["gateway CPU per turn"] == pytest.approx(2.0)


def test_each_line_shows_its_formula_with_the_numbers() -> None:
    d = Deployment(gpus=100, episodes_per_gpu=10, turns_per_episode=14, screenshot_kb=150, turn_s=5)
    lines = {line.name: line.formula for line in plan(d, COSTS)}
    assert lines["gateways"] == "max(ceil(0.60 cores / 0.5 a core) = 2, ceil(1000 x 15.0 MB / 16384 MB) = 1)"
    assert lines["producer processes"] == "ceil(1000 episodes / 512 a process)"
    text = render(plan(d, COSTS), COSTS)
    assert "gateways" in text and "assumptions: docs/capacity.md" in text


@pytest.mark.parametrize(
    "field", ["gpus", "episodes_per_gpu", "turns_per_episode", "screenshot_kb", "turn_s"]
)
def test_non_positive_inputs_are_refused(field: str) -> None:
    given = {"gpus": 1, field: 0}
    with pytest.raises(ValueError, match=field.replace("_", "-")):
        Deployment(**given)


def test_the_committed_costs_are_the_benchmarks_file() -> None:
    assert load_costs((ROOT / "bench" / "costs.json").read_text()) == MEASURED


def test_costs_that_are_not_costs_are_refused() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        load_costs("{")
    with pytest.raises(ValueError, match="per-core costs"):
        load_costs('{"gateway_cpu_s_per_1000_turns": 0, "gateway_mb_per_session": 1, "at_body_kb": 1}')


def test_plan_prints_the_lines_and_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    app = cli.full_app()
    done = runner.invoke(app, ["plan", "--gpus", "1000", "--episodes-per-gpu", "16", "--turns", "30"])
    assert done.exit_code == 0, done.output
    assert "gateways" in done.output and "object-store write" in done.output
    for argv in (
        ["--gpus", "0"],
        ["--gpus", "8", "--screenshot-kb", "-1"],
        ["--gpus", "8", "--costs", str(tmp_path)],
    ):
        bad = runner.invoke(app, ["plan", *argv])
        assert bad.exit_code == 2, (argv, bad.output)
        assert len(bad.output.strip().splitlines()) == 1 and "error" in bad.output
    costs = tmp_path / "c.json"
    costs.write_text('{"gateway_cpu_s_per_1000_turns": 2, "gateway_mb_per_session": 10, "at_body_kb": 1000}')
    given = runner.invoke(app, ["plan", "--gpus", "100", "--episodes-per-gpu", "10", "--turns", "14",
                                "--turn-s", "5", "--costs", str(costs)])  # fmt: skip
    assert given.exit_code == 0 and "2 ms measured at 1000 KB x 1.50" in given.output
