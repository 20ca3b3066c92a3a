"""The Megatron trainer backend for Qwen3-VL: the torch backend's interface, driving
``consumers/trainer/backends/megatron/worker.py --serve`` in megatron-bridge's own venv
(``scripts/megatron-env.sh``; megatron-bridge pins a transformers cua-stream's venv cannot hold, so the
model lives in another process).

The worker keeps the model (converted by megatron-bridge's ``AutoBridge``) and its AdamW across steps and
applies the torch backend's step semantics (several passes with the first's logprobs as the old ones, the
momentum reset, the clip); this side turns ``TrainItem``s into the worker's packed items (images through
the same processor as the torch backend) and decides ``groups.carries_signal``, the one definition of it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import torch

from consumers.trainer.backends.megatron import worker_file
from consumers.trainer.backends.megatron_layout import ONE_RANK, ParallelLayout
from consumers.trainer.backends.torch_backend import StepStats, TrainItem, loss_mask
from consumers.trainer.episodes.checks import Vocabulary
from consumers.trainer.episodes.sample_images import pixel_inputs
from consumers.trainer.grpo.groups import carries_signal
from consumers.trainer.grpo.loss import LossConfig, LossStats
from cua_stream import env_vars
from cua_stream.blobs import BlobStore
from cua_stream.config import child_env, environ
from cua_stream.image_grid import ImageGeometry

ROOT = Path(__file__).resolve().parents[3]  # the checkout (scripts/ beside consumers/)
DONE = "megatron-worker-done"
FAILED = "megatron-worker-failed"


class WorkerError(RuntimeError):
    """The worker answered a request with a failure, or died."""


def megatron_python() -> str:
    """megatron-bridge's python: ``CUA_MEGATRON_PYTHON``, else what ``scripts/megatron-env.sh`` prints (it
    makes the venv the first time)."""
    given = environ().get(env_vars.MEGATRON_PYTHON)
    if given:
        return given
    script = ROOT / "scripts/megatron-env.sh"
    if not script.is_file():  # an installed wheel: scripts/ is a checkout's
        raise WorkerError(
            "CUA_MEGATRON_PYTHON is not set and no checkout's scripts/megatron-env.sh is here to make "
            "megatron-bridge's venv: set CUA_MEGATRON_PYTHON to megatron-bridge's python"
        )
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise WorkerError(
            f"megatron-bridge's venv could not be made ({why}): run bash scripts/megatron-env.sh"
        )
    return done.stdout.strip().splitlines()[-1]


def read_answer(stdout: IO[str]) -> str:
    """The worker's answer line to the last request (its file), skipping whatever else it printed."""
    for line in stdout:
        if line.startswith(DONE + " "):
            return line[len(DONE) + 1 :].strip()
        if line.startswith(FAILED):
            raise WorkerError(line[len(FAILED) :].strip())
    raise WorkerError("the megatron worker exited (its stderr says why)")


def worker_items(items: Sequence[TrainItem], blobs: BlobStore, image_processor: Any) -> list[dict[str, Any]]:
    """``items`` as the worker takes them: tokens, images through the torch backend's processor path,
    rollout logprobs, loss mask, advantage and episode per sample."""
    out = []
    for item in items:
        sample = item.sample
        pixels, grid = pixel_inputs(sample.images, blobs, image_processor)
        out.append(
            {
                "tokens": torch.tensor(list(sample.tokens)),
                "pixel_values": pixels,
                "image_grid_thw": grid,
                "rollout_logprobs": torch.tensor(list(sample.rollout_logprobs), dtype=torch.float32),
                "loss_mask": loss_mask(sample),
                "advantage": item.advantage,
                "episode": item.episode,
            }
        )
    return out


class MegatronVLBackend:
    def __init__(
        self,
        model_path: str | Path,
        blobs: BlobStore,
        *,
        temperature: float = 1.0,
        lr: float = 1e-5,
        max_grad_norm: float = 1.0,
        loss: LossConfig | None = None,
        weights: str | Path | None = None,
        passes: int = 1,
        python: str | None = None,
        device: str = "cpu",
        layout: ParallelLayout = ONE_RANK,
    ) -> None:
        """As ``TorchBackend``'s; ``python``: megatron-bridge's (``megatron_python()`` by default);
        ``device``: where the worker's model trains (``trainer.device``); ``layout``: its ranks."""
        if passes < 1:
            raise ValueError("passes must be >= 1")
        if layout.world > 1:  # checked for the model at config time; the worker itself is one rank yet
            raise WorkerError(
                f"trainer.nproc_per_node, trainer.nnodes: {layout.world} ranks: the megatron worker runs one "
                "rank so far (tensor, pipeline and data parallelism are issue #53's next slices)"
            )
        from transformers import AutoConfig, AutoProcessor

        self.blobs = blobs
        self.temperature = temperature
        self.loss_config = loss or LossConfig()
        self.processor = AutoProcessor.from_pretrained(model_path)
        model_config = AutoConfig.from_pretrained(model_path)
        self.image_token_id = int(model_config.image_token_id)
        self.vocab_size = int(model_config.text_config.vocab_size)
        self._tmp = tempfile.TemporaryDirectory(prefix="megatron-worker-")
        self._n = 0
        self._proc = subprocess.Popen(
            [python or megatron_python(), str(worker_file()), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(PYTHONPATH=""),  # the worker sees its own venv only
        )
        self._request(
            {
                "op": "init",
                "model_dir": str(model_path),
                "device": device,
                "weights": str(weights) if weights else None,
                "temperature": temperature,
                "lr": lr,
                "max_grad_norm": max_grad_norm,
                "passes": passes,
                "loss": dataclasses.asdict(self.loss_config),
            }
        )

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._n += 1
        src = Path(self._tmp.name) / f"{self._n}.in.pt"
        dst = Path(self._tmp.name) / f"{self._n}.out.pt"
        torch.save(request, src)
        self._proc.stdin.write(f"{src} {dst}\n")
        self._proc.stdin.flush()
        answer = torch.load(read_answer(self._proc.stdout), weights_only=False)
        src.unlink()
        Path(dst).unlink()
        return answer

    def vocabulary(self) -> Vocabulary:
        """As ``TorchBackend.vocabulary``: what a sample must agree with to go through this model."""
        return Vocabulary(
            size=self.vocab_size,
            image_token_id=self.image_token_id,
            images=ImageGeometry.of(self.processor.image_processor),
        )

    def set_lr(self, lr: float) -> None:
        self._request({"op": "set_lr", "lr": lr})

    def step(self, items: Sequence[TrainItem]) -> StepStats:
        """As ``TorchBackend.step``, in the worker: ``passes`` updates, none when nothing carries a signal."""
        rewarded = carries_signal(item.advantage for item in items)
        answer = self._request(
            {"op": "step", "items": worker_items(items, self.blobs, self.processor.image_processor),
             "rewarded": rewarded}
        )  # fmt: skip
        return StepStats.of(items, LossStats(**answer["stats"]), answer["grad_norm"])

    def save(self, out_dir: str | Path, *, processor: bool = False) -> Path:
        return Path(self._request({"op": "save", "dir": str(out_dir), "processor": processor})["dir"])

    def optimizer_state(self) -> dict[str, Any]:
        """AdamW's state over megatron's parameters (their order and fused layout: it resumes this backend
        only, not the torch one)."""
        return self._request({"op": "optimizer_state"})["state"]

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self._request({"op": "load_optimizer_state", "state": state})

    def running(self) -> bool:
        """Whether the worker process is still up (``close`` ends it)."""
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=60)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._tmp.cleanup()
