"""The Megatron backend's optimizer steps against the torch backend's: the same weights after.

From the tiny checkpoint and the same items, the torch backend (Hugging Face transformers, AdamW) and
``MegatronVLBackend`` (``consumers/trainer/backends/megatron/worker.py --serve`` in megatron-bridge's venv:
one process, the model and AdamW living across requests) take the same steps: two passes over a batch with TIS
and a KL term (the second pass's old logprobs the first's), a learning-rate change (the daemon's warmup), then
a step where no episode carries a reward (the KL's gradient only: the momentum reset). Each saves its weights
for the engine; the two directories hold the same weights, compared as updates (after - start).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from consumers.trainer.backends.megatron_vl_backend import MegatronVLBackend
from consumers.trainer.backends.torch_backend import TorchBackend, TrainItem
from consumers.trainer.grpo.loss import LossConfig
from cua_stream.blobs import LocalBlobStore
from tests.contract.test_megatron_vl import megatron_python, step_items
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["megatron_python", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.model, pytest.mark.slow]

UPDATE_TOLERANCE = 1e-2
"""The two runs' whole updates differ by this share of the torch one's norm at most. Adam's first steps
move every weight by about ``lr`` whatever its gradient's size, so a gradient element near 0 whose sign the
two forwards' rounding flips moves by ``lr`` one way or the other: the per-element bound is ``2 lr`` a step
(checked too), the norm share small. Measured 9.3e-4 (worst element 1.8e-5 against a bound of 3.2e-4);
the worker with the momentum reset skipped gives 1.46, with ``set_lr`` ignored 0.77, with the second
pass's old logprobs its own instead of the first pass's 0.65."""


LR = 3e-5
"""The first step's (two passes). Small enough that the second pass's gradient is the policy loss's, not
the KL's: at 1e-3 the tiny random model moves so far in one update that the second pass's KL term
(k3, exponential in the logprob drop) was 28 000 and its gradient norm 6e6, and the second pass's old
logprobs (the first pass's, or wrongly its own) made no measurable difference to the weights (1e-7); at
3e-5 that mistake moves them by 19 % of the update."""
LATER_LR = 1e-4
"""The KL-only step's, set as the daemon's warmup sets it."""


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model.safetensors"))


def run(backend: TorchBackend | MegatronVLBackend, items: list[TrainItem], out: Path) -> tuple[float, float]:
    """The steps; the saved weights in ``out``; the second pass's clip fraction, seconds the steps took."""
    started = time.monotonic()
    first = backend.step(items)  # two passes, TIS and KL
    backend.set_lr(LATER_LR)
    backend.step([TrainItem(i.sample, 0.0, i.episode) for i in items])  # the KL only: momentum reset
    took = time.monotonic() - started
    backend.save(out)
    return first.loss.clip_fraction, took


def test_megatron_vl_steps_give_the_torch_backends_weights(
    megatron_python: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    items = step_items(tiny_model_dir, blobs)
    config = LossConfig(tis_clip=2.0, kl_coef=0.1)
    settings = {"lr": LR, "loss": config, "passes": 2}
    torch_clipped, torch_took = run(
        TorchBackend(tiny_model_dir, blobs, **settings), items, tmp_path / "torch"
    )
    megatron = MegatronVLBackend(tiny_model_dir, blobs, python=megatron_python, **settings)
    try:
        assert megatron.vocabulary() == TorchBackend(tiny_model_dir, blobs).vocabulary()
        megatron_clipped, megatron_took = run(megatron, items, tmp_path / "megatron")
    finally:
        megatron.close()
    start = TorchBackend(tiny_model_dir, blobs).model.state_dict()
    want, got = weights(tmp_path / "torch"), weights(tmp_path / "megatron")

    assert set(want) <= set(got)
    steps_lr = 2 * LR + LATER_LR  # two passes at LR, one at LATER_LR
    worst, diff_sq, norm_sq = 0.0, 0.0, 0.0
    for name, after in want.items():
        moved = after - start[name]
        off = got[name] - after
        worst = max(worst, float(off.abs().max()))
        diff_sq += float(off.pow(2).sum())
        norm_sq += float(moved.pow(2).sum())
    share = (diff_sq / norm_sq) ** 0.5
    print(
        f"update share {share:.3g}, worst element {worst:.3g}, clipped {torch_clipped:.3g} vs {megatron_clipped:.3g}, steps {torch_took:.1f}s vs {megatron_took:.1f}s"
    )
    assert norm_sq > 0  # the weights moved
    assert torch_clipped > 0  # the second pass's ratio, against the first pass's logprobs, clipped some
    assert worst <= 2 * steps_lr
    assert share <= UPDATE_TOLERANCE
