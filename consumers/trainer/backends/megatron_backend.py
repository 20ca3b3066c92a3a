"""The Megatron backend: megatron-core model code, trained on packed batches with the same GRPO loss.

A step packs its samples end to end (``packing``: THD layout, position ids restarting per sample, a
block-causal mask so a token sees only earlier tokens of its own sample), runs one forward pass, and
applies ``loss.policy_loss`` to the packed next-token logprobs, which equals the loss over the samples
one by one. On GPUs the model comes from megatron-bridge (Qwen3-VL) with tensor/pipeline parallelism
and Megatron's optimizer; neither installs here (megatron-bridge 0.6.2 pins transformers <= 5.12.1 and
CUDA-only packages; Megatron's optimizer and schedules allocate on CUDA), so the step is written against
a megatron-core ``GPTModel`` and a torch optimizer, which is what runs on a CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from consumers.trainer.backends.packing import block_causal_mask, pack
from consumers.trainer.backends.torch_backend import StepStats, TrainItem
from consumers.trainer.grpo.groups import carries_signal
from consumers.trainer.grpo.loss import LossConfig, policy_loss
from cua_stream.engine.forward import token_logprobs


class MegatronBackend:
    """One optimizer step at a time over a megatron-core model (``model(input_ids, position_ids,
    attention_mask)`` → logits)."""

    def __init__(
        self,
        model: Any,
        optimizer: torch.optim.Optimizer,
        *,
        temperature: float = 1.0,
        max_grad_norm: float = 1.0,
        loss: LossConfig | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.temperature = temperature
        self.max_grad_norm = max_grad_norm
        self.loss_config = loss or LossConfig()
        if self.loss_config.kl_coef:
            raise ValueError("kl_coef: the torch backend's for now (this one keeps no reference model)")

    def packed_logprobs(self, items: Sequence[TrainItem]) -> tuple[torch.Tensor, Any]:
        """The next-token logprob at every packed position (with grad), and the packed batch."""
        packed = pack(items)
        logits = self.model(
            input_ids=packed.tokens.unsqueeze(0),
            position_ids=packed.positions.unsqueeze(0),
            attention_mask=block_causal_mask(packed.cu_seqlens),
        )
        logp = token_logprobs(logits[0], self.temperature).gather(1, packed.labels.unsqueeze(1)).squeeze(1)
        return logp, packed

    def step(self, items: Sequence[TrainItem]) -> StepStats:
        self.optimizer.zero_grad(set_to_none=True)
        signal = carries_signal(item.advantage for item in items)  # no signal, no optimizer step
        with torch.set_grad_enabled(signal):
            logp, p = self.packed_logprobs(items)
            loss, stats = policy_loss(
                logp, p.rollout_logprobs, p.advantages, p.loss_mask, p.episodes, self.loss_config
            )
        if not signal:
            return StepStats.of(items, stats)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return StepStats.of(items, stats, float(grad_norm))
