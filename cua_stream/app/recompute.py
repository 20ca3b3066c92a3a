"""`inspect step --recompute`'s I/O edge: the weights a step started from, loaded from the trainer's
checkpoint directory into the trainer's own backend, and the step's batch measured under them
(``TorchBackend.measure``); the comparison itself is ``consumers.trainer.inspect.recompute`` (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from consumers.trainer.config import TRAINER_DEFAULTS
from consumers.trainer.grpo.loss_config import LossConfig
from consumers.trainer.inspect.recompute import Recomputation, batch_items, recomputation
from consumers.trainer.inspect.step import StepBatch
from cua_stream.config import ConfigError, require_model_dir, state_dir
from cua_stream.versions import trained_from


class RecomputeRules(msgspec.Struct, frozen=True, kw_only=True):
    """The trainer settings a recomputation needs (the ``[trainer]`` section's fields of the same names,
    their defaults read from its class). Torch is imported only when a recomputation runs: plain
    ``inspect`` starts without it."""

    model_path: str = ""
    blob_dir: str = ""
    temperature: float = TRAINER_DEFAULTS["temperature"]
    max_grad_norm: float = TRAINER_DEFAULTS["max_grad_norm"]
    passes: int = TRAINER_DEFAULTS["passes"]
    clip_low: float = LossConfig.clip_low
    clip_high: float = LossConfig.clip_high
    tis_clip: float | None = LossConfig.tis_clip
    loss_reduction: Literal["episode", "token"] = LossConfig.reduction
    kl_coef: float = LossConfig.kl_coef

    def loss(self) -> LossConfig:
        return LossConfig(
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            tis_clip=self.tis_clip,
            reduction=self.loss_reduction,
            kl_coef=self.kl_coef,
        )


def start_weights(directory: Path, run_id: str, version: int) -> Path | None:
    """The weights of ``version`` in the trainer checkpoint ``directory`` of ``run_id`` (None: version 0,
    the run's start model); one clear error if the directory is not that run's or no longer holds them."""
    from consumers.trainer import checkpoint as ckpt

    saved = ckpt.load(directory)
    if saved is None:
        raise ConfigError(f"--recompute: {directory} is not a trainer checkpoint directory (no {ckpt.FILE})")
    if saved.run_id != run_id:
        raise ConfigError(f"--recompute: {directory} is run {saved.run_id!r}'s checkpoint, not {run_id!r}'s")
    if version > saved.version:
        raise ConfigError(f"--recompute: {directory} is at v{saved.version}, before v{version}")
    try:
        return ckpt.weights_of(directory, version)
    except LookupError as e:
        raise ConfigError(f"--recompute: {e}") from None


def recompute(batch: StepBatch, directory: Path, rules: RecomputeRules, *, top_k: int) -> Recomputation:
    """Measure ``batch`` under the weights its step started from (version N-1 of the checkpoint in
    ``directory``) with the trainer's backend and settings, beside the step's record."""
    if not rules.model_path:
        raise ConfigError(
            "--recompute: needs the run's start model (its processor, v0, the KL reference): --model or "
            "the config's trainer.model_path"
        )
    require_model_dir("--model (or trainer.model_path)", rules.model_path)
    weights = start_weights(directory, batch.step.run_id, trained_from(batch.step.policy_version))
    from consumers.trainer.backends.torch_backend import TorchBackend, TrainItem
    from cua_stream.blobs import open_blob_store

    backend = TorchBackend(
        rules.model_path,
        open_blob_store(rules.blob_dir or str(state_dir() / "blobs")),
        temperature=rules.temperature,
        max_grad_norm=rules.max_grad_norm,
        loss=rules.loss(),
        weights=weights,
    )
    items = [TrainItem(sample, advantage, episode) for sample, advantage, episode in batch_items(batch)]
    stats, packed = backend.measure(items)
    per_sample, at = [], 0
    for item in items:
        n = len(item.sample.tokens)
        per_sample.append(packed[at : at + n].tolist())
        at += n
    metrics = {
        "loss": stats.loss.loss,
        "logprob_gap": stats.loss.logprob_gap,
        "grad_norm": stats.grad_norm,
        "kl": stats.loss.kl,
        "clip_fraction": stats.loss.clip_fraction,
        "trained_tokens": float(stats.loss.tokens),
    }
    return recomputation(batch, metrics, per_sample, passes=rules.passes, top_k=top_k)
