"""megatron-bridge's Qwen3-VL against the torch backend, on the tiny checkpoint: the same logprobs.

The torch backend (Hugging Face transformers, one sample per forward pass, the images from the blob store
through the real processor) gives the trainer's logprob of each trained token. The same samples go, packed
end to end in one THD sequence, to ``scripts/megatron_vl_worker.py`` in megatron-bridge's own venv
(``scripts/megatron-env.sh``; it cannot share cua-stream's transformers), which converts the checkpoint
with megatron-bridge's ``AutoBridge`` (its Qwen3-VL provider and weight mappings) and runs its Qwen3-VL
model: vision tower, deepstack, M-RoPE restarting per packed sample. On this CPU host megatron-core's local
modules stand in for Transformer Engine (see the worker). The loss and gradient on top of these logprobs
are the project's ``policy_loss``, whose packed form tests/unit/test_trainer_packing.py checks.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from consumers.trainer.images import pixel_inputs
from consumers.trainer.samples import Sample, assemble
from consumers.trainer.torch_backend import TorchBackend
from cua_stream.blobs import LocalBlobStore
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_trainer_torch import one_turn
from tests.unit.test_trainer_samples import call

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "scripts/megatron_vl_worker.py"
TOLERANCE = 1e-3
"""Measured on the tiny model (float32, CPU): text tokens differ by about 1e-6, tokens after a
screenshot by about 2e-4 (the vision tower's ops in another order)."""


@pytest.fixture(scope="module")
def megatron_python() -> str:
    """megatron-bridge's venv (CUA_MEGATRON_PYTHON if given); made here otherwise."""
    given = os.environ.get("CUA_MEGATRON_PYTHON")
    if given:
        return given
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/megatron-env.sh")], capture_output=True, text=True, timeout=1500
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.fail(f"megatron-bridge's venv could not be made ({why}): run bash scripts/megatron-env.sh")
    return done.stdout.strip().splitlines()[-1]


def worker_logprobs(
    python: str, model_dir: Path, samples: list[Sample], backend: TorchBackend, tmp: Path
) -> list[torch.Tensor]:
    items = []
    for sample in samples:
        pixels, grid = pixel_inputs(sample.images, backend.blobs, backend.processor.image_processor)
        items.append(
            {"tokens": torch.tensor(list(sample.tokens)), "pixel_values": pixels, "image_grid_thw": grid}
        )
    torch.save({"temperature": backend.temperature, "items": items}, tmp / "in.pt")
    env = {**os.environ, "PYTHONPATH": ""}  # the worker sees its own venv only
    done = subprocess.run(
        [python, str(WORKER), str(model_dir), str(tmp / "in.pt"), str(tmp / "out.pt")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return torch.load(tmp / "out.pt", weights_only=True)["logprobs"]


def trained(sample: Sample) -> torch.Tensor:
    mask = torch.tensor(list(sample.loss_mask), dtype=torch.bool)
    mask[0] = False  # the first token is predicted by nothing
    return mask


def test_megatron_bridge_qwen3_vl_packed_logprobs_equal_the_torch_backend(
    megatron_python: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    screenshot, _ = one_turn(tiny_model_dir, blobs)
    (with_image,) = assemble([screenshot]).samples
    (text,) = assemble(
        [call(0, None, [9, 301, 4096], [77, 15000, 2]), call(1, 0, [151644, 8], [640])]
    ).samples
    (short,) = assemble([call(0, None, [5, 6], [7, 8, 9])]).samples
    # a screenshot sample between two text ones: its image and M-RoPE positions must land on its own tokens
    samples = [text, with_image, short]
    backend = TorchBackend(tiny_model_dir, blobs)
    got = worker_logprobs(megatron_python, tiny_model_dir, samples, backend, tmp_path)

    assert [len(g) for g in got] == [len(s.tokens) for s in samples]
    for sample, logp in zip(samples, got, strict=True):
        with torch.no_grad():
            want = backend.token_logprobs(sample)
        mask = trained(sample)
        assert mask.sum() > 0 and logp[0] == 0.0
        assert want[mask].abs().min() > 0.01  # real logprobs, not the zeros of untrained positions
        assert logp[mask].tolist() == pytest.approx(want[mask].tolist(), abs=TOLERANCE)
