"""megatron-bridge's Qwen3-VL split over ranks, on this CPU host over gloo: TP = 2, PP = 2 and DP = 2 each
give one rank's loss and gradient norm, and export the same Hugging Face weights, bit for bit
(``scripts/megatron_parallel_probe.py`` under megatron-bridge's torchrun: the tiny model, vision tower
included, two text items and two with an image).

What this checks is megatron's split of the model: the tensor-parallel layers and their all-reduces, the
vocabulary shards gathered, the pipeline stages with the vision tower and deepstack on the first, the
replicas' gradients summed, the export gathering the shards and stages. Not the trainer: its worker runs one
rank yet (a multi-rank layout stops it at start). And not megatron's own pipeline schedules, gradient-norm
and distributed optimizer: they allocate on CUDA (measured, ``schedules.py:2292``,
``clip_grads.get_grad_norm_fp32``), so the probe passes the stages' tensors and sums the norms itself. Each
mutant breaks one thing a parallel run needs and must differ; the probe runs them after the real run, in
the same launch (each launch costs ~18 s of imports here).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from consumers.trainer.backends.megatron_vl_backend import WorkerError
from consumers.trainer.backends.megatron_vl_backend import megatron_python as backend_python
from cua_stream.config import child_env
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.model, pytest.mark.slow]

PROBE = Path(__file__).resolve().parents[2] / "scripts/megatron_parallel_probe.py"
LOSS_TOLERANCE = 1e-5
"""Relative; measured 1e-7 (float32: the shards' sums in another order)."""
NORM_TOLERANCE = 1e-4
"""Relative; measured 7e-6 at worst (TP = 2)."""
STEPS, LR = 2, 0.0002
"""SGD steps after the first measurement, on the same batch, under the trainer's GRPO loss with TIS and the
KL term; the weights after them compared. (The tiny random model is steep: at lr 0.002 one step sends the
KL term, and the next loss, from -0.08 to 460; at 0.0002 the loss goes -0.08, -0.41.)"""
WEIGHT_TOLERANCE = 1e-5
"""The largest difference in any weight after the steps, relative to that tensor's largest magnitude."""


@pytest.fixture(scope="module")
def megatron_python() -> str:
    try:
        return backend_python()
    except WorkerError as e:
        pytest.fail(str(e))


def probe(python: str, model: Path, nproc: int, out: Path, *args: str) -> dict[str, Any]:
    torchrun = str(Path(python).parent / "torchrun")
    cmd = [torchrun, "--standalone", f"--nproc_per_node={nproc}", str(PROBE), str(model), "--export"]
    cmd += ["--grpo", "--steps", str(STEPS), "--lr", str(LR), "--save", str(out.with_suffix(".safetensors"))]
    done = subprocess.run(
        [*cmd, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(PYTHONPATH="", OMP_NUM_THREADS="1"),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("probe ")]
    assert done.returncode == 0, "\n".join(lines) + done.stderr[-3000:]
    return json.loads(out.read_text()) | {"saved": str(out.with_suffix(".safetensors"))}


@pytest.fixture(scope="module")
def four_layers(megatron_python: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with 4 language layers (random, seeded): its 2 deepstack layers must sit on PP's
    first stage, which the tiny model's 2 layers cannot split for (``megatron_layout``)."""
    out = tmp_path_factory.mktemp("tiny-4-layers")
    cmd = [megatron_python, str(PROBE), str(tiny_model_dir), "--make-variant", str(out), "--layers", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=child_env(PYTHONPATH=""))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def one_rank(
    megatron_python: str, tiny_model_dir: Path, four_layers: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("one-rank")
    return {
        "tiny": probe(megatron_python, tiny_model_dir, 1, out / "tiny.json"),
        "four": probe(megatron_python, four_layers, 1, out / "four.json"),
    }


LAYOUTS = {"tp2": ("tiny", ["--tp", "2"]), "dp2": ("tiny", []), "pp2": ("four", ["--pp", "2"])}
MUTANTS = {
    "tp2": ["no_grad_allreduce", "layernorms_not_summed", "shards_swapped"],
    "dp2": ["no_dp_allreduce"],
    "pp2": ["no_grad_allreduce", "drop_vision"],
}


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def weight_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


def digest(tensor: torch.Tensor) -> str:
    raw = tensor.contiguous().view(torch.uint8).numpy().tobytes()
    return f"{tensor.dtype} {list(tensor.shape)} {hashlib.sha256(raw).hexdigest()}"


@pytest.fixture(scope="module")
def two_ranks(
    megatron_python: str, tiny_model_dir: Path, four_layers: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Each layout's run on two ranks, its mutants after it in the same launch."""
    out = tmp_path_factory.mktemp("two-ranks")
    models = {"tiny": tiny_model_dir, "four": four_layers}
    return {
        layout: probe(megatron_python, models[model], 2, out / f"{layout}.json", *args, "--mutants")
        for layout, (model, args) in LAYOUTS.items()
    }


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_two_ranks_give_one_ranks_loss_gradient_norm_and_exported_weights(
    layout: str, one_rank: dict[str, dict[str, Any]], two_ranks: dict[str, dict[str, Any]]
) -> None:
    got, want = two_ranks[layout], one_rank[LAYOUTS[layout][0]]
    assert relative(got["loss"], want["loss"]) < LOSS_TOLERANCE, (got, want)
    assert relative(got["grad_norm"], want["grad_norm"]) < NORM_TOLERANCE, (got, want)
    qk = got["qk_layernorm_grad_norm"], want["qk_layernorm_grad_norm"]
    assert qk[1] > 0 and relative(*qk) < NORM_TOLERANCE, qk
    # the shards and stages gathered back: every weight under its name, its bytes the one rank's
    assert len(want["export"]) > 50 and got["export"] == want["export"]
    # two SGD steps on (the trainer's GRPO loss): each step's loss, and every weight after them, as one rank's
    assert len(got["step_losses"]) == STEPS and got["step_losses"][-1] < got["step_losses"][0]
    for a, b in zip(got["step_losses"], want["step_losses"], strict=True):
        assert relative(a, b) < LOSS_TOLERANCE, (got["step_losses"], want["step_losses"])
    stepped, reference = load_file(got["saved"]), load_file(want["saved"])
    assert set(stepped) == set(reference)
    moved = [n for n in reference if digest(reference[n]) != want["export"][n]]
    assert len(moved) > 20  # the steps changed the model (not a comparison of two untouched copies)
    worst = {n: weight_gap(stepped[n], reference[n]) for n in reference}
    assert max(worst.values()) < WEIGHT_TOLERANCE, sorted(worst.items(), key=lambda kv: -kv[1])[:5]


def test_one_ranks_export_is_the_checkpoint_it_loaded(
    tiny_model_dir: Path, one_rank: dict[str, dict[str, Any]]
) -> None:
    """The export the layouts are held to is the Hugging Face checkpoint itself: same names, same bytes."""
    weights = load_file(str(tiny_model_dir / "model.safetensors"))
    assert set(one_rank["tiny"]["export"]) == set(weights)
    assert {name: digest(tensor) for name, tensor in weights.items()} == one_rank["tiny"]["export"]


@pytest.mark.parametrize("layout", list(MUTANTS))
def test_a_parallel_run_missing_a_step_is_told_apart(
    layout: str, one_rank: dict[str, dict[str, Any]], two_ranks: dict[str, dict[str, Any]]
) -> None:
    """TP or PP without the norm's all-reduce (each rank sees its shards only), TP's QK layernorm gradients
    not summed over the ranks' heads, TP's shards gathered in the wrong order, DP without the replicas'
    gradient sum, PP with the first stage's vision input zeroed."""
    want = one_rank[LAYOUTS[layout][0]]
    mutants = two_ranks[layout]["mutants"]
    assert sorted(mutants) == sorted(MUTANTS[layout])
    for name, got in mutants.items():
        if "export" in got:
            differ = {k for k, v in got["export"].items() if want["export"].get(k) != v}
            assert len(differ) > 5, (name, differ)  # every split weight, not one
        elif "qk_layernorm_grad_norm" in got:
            qk = got["qk_layernorm_grad_norm"], want["qk_layernorm_grad_norm"]
            assert relative(*qk) > 100 * NORM_TOLERANCE, (name, qk)
        else:
            worst = max(relative(got["loss"], want["loss"]), relative(got["grad_norm"], want["grad_norm"]))
            assert worst > 100 * NORM_TOLERANCE, (name, got, want)
