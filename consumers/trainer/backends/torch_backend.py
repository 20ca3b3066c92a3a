"""The embedded trainer backend: a transformers Qwen3-VL trained with torch (CPU, or one GPU).

Per sample, one forward pass over its tokens (with its images' pixel values) gives the trainer's
logprob of every token under the sampling temperature, through the engine's own ``token_logprobs`` (the
one place the distribution is decided, so the trainer and the engine compare like with like). The
samples of a step are packed into one loss (``loss.policy_loss``), then one AdamW step with gradient
clipping. ``save`` writes weights the engine loads with ``/update_weights_from_disk``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from consumers.trainer.episodes.checks import Vocabulary
from consumers.trainer.episodes.sample_images import pixel_inputs
from consumers.trainer.episodes.samples import Sample
from consumers.trainer.grpo.groups import carries_signal
from consumers.trainer.grpo.loss import LossConfig, LossStats, policy_loss
from consumers.trainer.sft.demonstrations import sft_loss
from cua_stream.blobs import BlobStore
from cua_stream.engine.forward import prompt_position_ids, token_logprobs
from cua_stream.image_grid import ImageGeometry


def loss_mask(sample: Sample) -> torch.Tensor:
    """``sample``'s loss mask as a uint8 tensor (1 = trained)."""
    return torch.frombuffer(bytearray(sample.loss_mask), dtype=torch.uint8)


@dataclass(frozen=True)
class TrainItem:
    """A sample with its episode's advantage, and the episode's index within the step."""

    sample: Sample
    advantage: float
    episode: int


@dataclass(frozen=True)
class StepStats:
    loss: LossStats
    grad_norm: float
    samples: int
    episodes: int

    @classmethod
    def of(cls, items: Sequence[TrainItem], loss: LossStats, grad_norm: float = 0.0) -> StepStats:
        """A step's statistics over ``items`` (no optimizer step: a grad norm of 0)."""
        return cls(
            loss=loss, grad_norm=grad_norm, samples=len(items), episodes=len({i.episode for i in items})
        )


class TorchBackend:
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
    ) -> None:
        """``model_path`` holds the processor and the starting weights; ``weights``, if given, weights
        saved by an earlier ``save`` (a checkpoint) to start from instead. ``passes``: optimizer updates
        per step on the same batch (GRPO's μ)."""
        if passes < 1:
            raise ValueError("passes must be >= 1")
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.blobs = blobs
        self.temperature = temperature
        self.max_grad_norm = max_grad_norm
        self.passes = passes
        self.loss_config = loss or LossConfig()
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.model = AutoModelForImageTextToText.from_pretrained(weights or model_path, dtype=torch.float32)
        self.model.train()
        self.reference = None
        if self.loss_config.kl_coef:  # the run's start, frozen, whatever checkpoint ``weights`` resumes
            self.reference = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
            self.reference.eval().requires_grad_(False)
        # fused: the same update, one kernel per tensor. The embedding and head (152k rows each) are most
        # of the weights, so the unfused update was most of a small step: an SFT step of one screenshot
        # took 0.31 -> 0.20 s on tiny, 1.07 -> 0.64 s on small (bench/trainer_optimizer.py)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, fused=True)
        self.image_token_id = int(self.model.config.image_token_id)

    def token_logprobs(self, sample: Sample, model: Any = None) -> torch.Tensor:
        """The trainer's logprob of each of ``sample``'s trained tokens (with grad), 0 elsewhere (the loss
        masks those out). Only the trained positions are projected on the vocabulary: with Qwen's 151k
        entries the full-sequence logits of a screenshot episode are hundreds of MB, and their softmax
        was most of a step's time for the ~10 % of tokens that train. ``model``: another with the same
        vocabulary (the KL reference); the trained one by default."""
        model = model or self.model
        ids = torch.tensor([list(sample.tokens)], dtype=torch.long)
        trained = loss_mask(sample).nonzero().squeeze(1)
        trained = trained[trained > 0]  # the first token is predicted by nothing
        pixel_values, grid = pixel_inputs(sample.images, self.blobs, self.processor.image_processor)
        positions, _ = prompt_position_ids(model, ids, grid)
        extra: dict[str, Any] = {}
        if pixel_values is not None:
            extra = {
                "pixel_values": pixel_values,
                "image_grid_thw": grid,
                "mm_token_type_ids": (ids == self.image_token_id).int(),
            }
        rows = trained - 1  # row i predicts token i + 1
        logits = model(
            input_ids=ids, position_ids=positions, use_cache=False, logits_to_keep=rows, **extra
        ).logits
        picked = (
            token_logprobs(logits[0], self.temperature).gather(1, ids[0, trained].unsqueeze(1)).squeeze(1)
        )
        return logits.new_zeros(ids.shape[1]).index_put((trained,), picked)

    def vocabulary(self) -> Vocabulary:
        """What a sample must agree with to go through this model (``samples.check_call``)."""
        return Vocabulary(
            size=int(self.model.config.text_config.vocab_size),
            image_token_id=self.image_token_id,
            images=ImageGeometry.of(self.processor.image_processor),
        )

    def set_lr(self, lr: float) -> None:
        """The learning rate of the updates from now on (the trainer's warmup sets it before a step)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, items: Sequence[TrainItem]) -> StepStats:
        """``passes`` optimizer updates over ``items`` (every sample of the step's episodes); none when
        every advantage is 0 and there is no KL term (``groups.carries_signal``: the statistics are still
        measured). After the first update the trainer's logprobs move away from the rollout's and the
        ratio clip bounds how far: the step's size is set by the clip, not only by the learning rate. The statistics are the
        first pass's (the logprob gap is the sampler's lag), with the last pass's clip fraction."""
        reference = self._reference_logprobs(items)
        first, old = self._update(items, reference, None)
        last = first
        if not carries_signal((item.advantage for item in items), kl_anchor=self.reference is not None):
            return first
        for _ in range(self.passes - 1):  # the old logprobs stay the first pass's: the clip bounds the drift
            last, _ = self._update(items, reference, old)
        return replace(first, loss=replace(first.loss, clip_fraction=last.loss.clip_fraction))

    def measure(self, items: Sequence[TrainItem]) -> tuple[StepStats, torch.Tensor]:
        """What ``step`` would record for ``items`` under the current weights (its first pass: loss, logprob
        gap, KL, grad norm), without updating them; and the trainer's logprob of each packed token (0 where
        not trained). ``cua-stream inspect step --recompute`` measures a past step with it."""
        stats, logprobs, _ = self._backward(items, self._reference_logprobs(items), None)
        self.optimizer.zero_grad(set_to_none=True)
        return stats, logprobs

    def _reference_logprobs(self, items: Sequence[TrainItem]) -> torch.Tensor | None:
        if self.reference is None:
            return None
        with torch.no_grad():
            return torch.cat([self.token_logprobs(item.sample, self.reference) for item in items])

    def _update(
        self, items: Sequence[TrainItem], reference: torch.Tensor | None, old: torch.Tensor | None
    ) -> tuple[StepStats, torch.Tensor]:
        """One update; its statistics and the logprobs it started from (detached)."""
        stats, started, signal = self._backward(items, reference, old)
        if signal:
            if not carries_signal(item.advantage for item in items):
                self._forget_momentum()
            self.optimizer.step()
        return stats, started

    def _backward(
        self, items: Sequence[TrainItem], reference: torch.Tensor | None, old: torch.Tensor | None
    ) -> tuple[StepStats, torch.Tensor, bool]:
        """The loss over ``items`` and, when there is a signal to train on, its gradient (clipped): the
        statistics, the logprobs it started from (detached), and whether there is a gradient."""
        self.optimizer.zero_grad(set_to_none=True)
        rewarded = carries_signal(item.advantage for item in items)
        signal = rewarded or self.reference is not None  # with a KL its anchor is a signal too
        with torch.set_grad_enabled(signal):
            logprobs = torch.cat([self.token_logprobs(item.sample) for item in items])
            rollout = torch.cat(
                [torch.tensor(item.sample.rollout_logprobs, dtype=torch.float32) for item in items]
            )
            mask = torch.cat([loss_mask(item.sample) for item in items])
            advantages = torch.cat([torch.full((len(item.sample.tokens),), item.advantage) for item in items])
            episodes = torch.cat(
                [torch.full((len(item.sample.tokens),), item.episode, dtype=torch.long) for item in items]
            )
            loss, stats = policy_loss(
                logprobs, rollout, advantages, mask, episodes, self.loss_config, reference, old
            )
        started = logprobs.detach()
        if not signal:
            return StepStats.of(items, stats), started, False
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        return StepStats.of(items, stats, float(grad_norm)), started, True

    def _forget_momentum(self) -> None:
        """Before a step whose only gradient is the KL anchor's (no group carried a reward signal): AdamW
        moves by its momentum, not by the gradient, so such a step would otherwise repeat ~90 % of the last
        rewarded update, and a run of them (batches where every group won) adds those up. In
        ``cua-stream learn`` each of a run's KL jumps (0.02 to 0.1-0.4 nat per token, then a fall in reward)
        came one to three steps after such a batch. With the momentum forgotten the step follows the KL's
        own gradient (under Adam's running scale) rather than the last update."""
        for state in self.optimizer.state.values():
            if "exp_avg" in state:
                state["exp_avg"].zero_()

    def sft_step(self, samples: Sequence[Sample]) -> tuple[float, int, float]:
        """One optimizer step of cross-entropy on ``samples``' trained tokens: (loss, tokens, grad norm)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss, n = self._sft_loss(samples)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return float(loss.detach()), n, float(grad_norm)

    def nll(self, samples: Sequence[Sample]) -> float:
        """The mean negative logprob of ``samples``' trained tokens under the current weights."""
        with torch.no_grad():
            return float(self._sft_loss(samples)[0])

    def _sft_loss(self, samples: Sequence[Sample]) -> tuple[torch.Tensor, int]:
        return sft_loss([self.token_logprobs(s) for s in samples], [loss_mask(s) for s in samples])

    def close(self) -> None:
        """Nothing to release: the model lives in this process (the megatron backend's does not)."""

    def save(self, out_dir: str | Path, *, processor: bool = False) -> Path:
        """The weights (and config) where the engine can load them; with ``processor``, a whole model
        directory (tokenizer, chat template, image processor too) an engine can start from."""
        out = Path(out_dir)
        self.model.save_pretrained(out)
        if processor:
            self.processor.save_pretrained(out)
        return out

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)
