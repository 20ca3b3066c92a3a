"""megatron-bridge's Qwen3-VL against the torch backend, on the tiny checkpoint: the same logprobs.

The torch backend (Hugging Face transformers, one sample per forward pass, the images from the blob store
through the real processor) gives the trainer's logprob of each trained token. The same samples go, packed end
to end in one THD sequence, to ``consumers/trainer/backends/megatron/worker.py`` in megatron-bridge's own venv
(``scripts/megatron-env.sh``; it cannot share cua-stream's transformers), which converts the checkpoint with
megatron-bridge's ``AutoBridge`` (its Qwen3-VL provider and weight mappings) and runs its Qwen3-VL model:
vision tower, deepstack, M-RoPE restarting per packed sample. On this CPU host megatron-core's local modules
stand in for Transformer Engine (see the worker). Then the step's loss (the project's ``policy_loss`` over the
packed logprobs, in the worker) and its gradient against the torch backend's.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from consumers.trainer.backends.megatron import worker_file
from consumers.trainer.backends.megatron_vl_backend import WorkerError, worker_items
from consumers.trainer.backends.megatron_vl_backend import megatron_python as backend_python
from consumers.trainer.backends.torch_backend import TorchBackend, TrainItem, loss_mask
from consumers.trainer.episodes.samples import Sample, assemble
from consumers.trainer.grpo.loss import LossConfig, policy_loss
from cua_stream.blobs import LocalBlobStore
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_trainer_torch import one_turn
from tests.unit.test_trainer_samples import call

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.model, pytest.mark.slow]

WORKER = worker_file()
TOLERANCE = 1e-3
"""Measured on the tiny model (float32, CPU): text tokens differ by about 1e-6, tokens after a
screenshot by about 2e-4 (the vision tower's ops in another order)."""


GRAD_TOLERANCE = 2e-3
"""Per weight, relative to its largest gradient element; measured 2.4e-4 at worst (layer 1's q_norm, then
the vision tower's deepstack merger)."""


@pytest.fixture(scope="module")
def megatron_python() -> str:
    """megatron-bridge's venv (CUA_MEGATRON_PYTHON if given); made here otherwise."""
    try:
        return backend_python()
    except WorkerError as e:
        pytest.fail(str(e))


CONFIGS = {"clip": LossConfig(), "tis-token": LossConfig(tis_clip=2.0, reduction="token")}


@dataclasses.dataclass
class Answers:
    """The worker's answers for one set of items: ``"logprobs"`` (no loss) and one per ``CONFIGS`` key."""

    items: list[TrainItem]
    blobs: LocalBlobStore
    by_request: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def answers(megatron_python: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Answers:
    """Every request of this file in one worker process (it builds the model once: most of a request's
    time), each answer as it would be alone (the worker zeroes the gradients before each loss)."""
    tmp = tmp_path_factory.mktemp("megatron-vl")
    blobs = LocalBlobStore(tmp / "blobs")
    items = step_items(tiny_model_dir, blobs)
    backend = TorchBackend(tiny_model_dir, blobs)
    batch = worker_items(items, backend.blobs, backend.processor.image_processor)
    requests: dict[str, dict[str, Any]] = {"logprobs": {"temperature": backend.temperature, "items": batch}}
    for name, config in CONFIGS.items():
        requests[name] = requests["logprobs"] | {"loss": dataclasses.asdict(config)}
    pairs: list[str] = []
    for name, request in requests.items():
        torch.save(request, tmp / f"{name}.in.pt")
        pairs += [str(tmp / f"{name}.in.pt"), str(tmp / f"{name}.out.pt")]
    env = {**os.environ, "PYTHONPATH": ""}  # the worker sees its own venv only
    done = subprocess.run(
        [megatron_python, str(WORKER), str(tiny_model_dir), *pairs],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = {name: torch.load(tmp / f"{name}.out.pt", weights_only=True) for name in requests}
    return Answers(items, blobs, got)


def trained(sample: Sample) -> torch.Tensor:
    mask = torch.tensor(list(sample.loss_mask), dtype=torch.bool)
    mask[0] = False  # the first token is predicted by nothing
    return mask


def step_items(model_dir: Path, blobs: LocalBlobStore) -> list[TrainItem]:
    """Two episodes: a screenshot sample (the engine's completion and logprobs) between two text ones, so
    its image and M-RoPE positions must land on its own tokens in the pack."""
    screenshot, _ = one_turn(model_dir, blobs)
    (with_image,) = assemble([screenshot]).samples
    (text,) = assemble(
        [call(0, None, [9, 301, 4096], [77, 15000, 2]), call(1, 0, [151644, 8], [640])]
    ).samples
    (short,) = assemble([call(0, None, [5, 6], [7, 8, 9])]).samples
    return [TrainItem(text, 0.7, 0), TrainItem(with_image, -0.4, 1), TrainItem(short, 0.7, 0)]


def test_megatron_bridge_qwen3_vl_packed_logprobs_equal_the_torch_backend(
    answers: Answers, tiny_model_dir: Path
) -> None:
    samples = [item.sample for item in answers.items]
    backend = TorchBackend(tiny_model_dir, answers.blobs)
    got = answers.by_request["logprobs"]["logprobs"]

    assert [len(g) for g in got] == [len(s.tokens) for s in samples]
    for sample, logp in zip(samples, got, strict=True):
        with torch.no_grad():
            want = backend.token_logprobs(sample)
        mask = trained(sample)
        assert mask.sum() > 0 and logp[0] == 0.0
        assert want[mask].abs().min() > 0.01  # real logprobs, not the zeros of untrained positions
        assert logp[mask].tolist() == pytest.approx(want[mask].tolist(), abs=TOLERANCE)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_megatron_bridge_qwen3_vl_loss_and_gradient_equal_the_torch_backend(
    name: str, answers: Answers, tiny_model_dir: Path
) -> None:
    """The step's loss (PPO clip and the episode mean; TIS and the token mean), its statistics, the
    gradient's norm, and the gradient of every checkpoint weight, vision tower included, element for
    element: megatron's gradients come back under their Hugging Face names through megatron-bridge's own
    weight export (its fused QKV and gate/up split as the weights are)."""
    config, items = CONFIGS[name], answers.items
    backend = TorchBackend(tiny_model_dir, answers.blobs, loss=config, max_grad_norm=1e9)
    got = answers.by_request[name]

    want, _ = backend.measure(items)
    # the text samples' rollout logprobs are 0: ratios far from 1 (clipped), TIS weights far from 1
    assert want.grad_norm > 0 and want.loss.logprob_gap > 1
    assert want.loss.clip_fraction > 0 or config.tis_clip
    assert got["loss"] == pytest.approx(want.loss.loss, abs=TOLERANCE)
    assert got["stats"]["tokens"] == want.loss.tokens
    assert got["stats"]["clip_fraction"] == pytest.approx(want.loss.clip_fraction)
    assert got["stats"]["logprob_gap"] == pytest.approx(want.loss.logprob_gap, abs=TOLERANCE)
    assert got["grad_norm"] == pytest.approx(want.grad_norm, rel=1e-3)

    backend.model.zero_grad(set_to_none=True)
    logprobs = torch.cat([backend.token_logprobs(item.sample) for item in items])
    rollout = torch.cat([torch.tensor(list(i.sample.rollout_logprobs), dtype=torch.float32) for i in items])
    per_token = [len(item.sample.tokens) for item in items]
    advantages = torch.cat([torch.full((n,), i.advantage) for n, i in zip(per_token, items, strict=True)])
    episodes = torch.cat([torch.full((n,), i.episode) for n, i in zip(per_token, items, strict=True)])
    mask = torch.cat([loss_mask(item.sample) for item in items])
    policy_loss(logprobs, rollout, advantages, mask, episodes, config)[0].backward()
    grads = got["grads"]
    names = dict(backend.model.named_parameters())
    assert set(grads) == set(names)
    for name, param in names.items():
        want_grad = param.grad if param.grad is not None else torch.zeros_like(param)
        scale = float(want_grad.abs().max())
        error = float((grads[name] - want_grad).abs().max())
        assert error <= GRAD_TOLERANCE * scale + 1e-7, f"{name}: off by {error:.3g} (largest {scale:.3g})"
    assert names["model.visual.patch_embed.proj.weight"].grad.abs().max() > 0  # the image took part
