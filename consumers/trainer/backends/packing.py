"""Packing a step's samples into one sequence for Megatron (THD layout), and back. Pure torch.

Megatron trains variable-length samples packed end to end: one token row, position ids restarting at each
sample, ``cu_seqlens`` marking the boundaries, and next-token labels. Everything the loss needs is moved
to the same layout, shifted by one: at packed position ``i`` the model predicts ``labels[i]``, so the loss
mask, rollout logprob, advantage and episode of position ``i`` are those of the *label* token. The last
position of each sample predicts nothing and is masked.

``policy_loss`` over a packed batch equals the loss over the same samples one by one (a test holds the two
backends to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from consumers.trainer.episodes.samples import Sample


class PackItem(Protocol):
    """What packing needs of a train item (``torch_backend.TrainItem`` has it)."""

    sample: Sample
    advantage: float
    episode: int


@dataclass(frozen=True)
class Packed:
    tokens: torch.Tensor
    """(T,) every sample's tokens, end to end."""
    positions: torch.Tensor
    """(T,) position within its sample."""
    labels: torch.Tensor
    """(T,) the next token (0 at a sample's last position, which is masked)."""
    loss_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    episodes: torch.Tensor
    cu_seqlens: torch.Tensor
    """(n + 1,) int32 sample boundaries, as Megatron's ``PackedSeqParams`` takes them."""


def pack(items: Sequence[PackItem]) -> Packed:
    tokens, positions, labels, mask, rollout, adv, eps = [], [], [], [], [], [], []
    bounds = [0]
    for item in items:
        s = item.sample
        ids = torch.tensor(list(s.tokens), dtype=torch.long)
        n = len(ids)
        tokens.append(ids)
        positions.append(torch.arange(n))
        labels.append(torch.cat([ids[1:], ids.new_zeros(1)]))
        m = torch.tensor(list(s.loss_mask), dtype=torch.float32)
        mask.append(torch.cat([m[1:], m.new_zeros(1)]))
        lp = torch.tensor(list(s.rollout_logprobs), dtype=torch.float32)
        rollout.append(torch.cat([lp[1:], lp.new_zeros(1)]))
        adv.append(torch.full((n,), item.advantage))
        eps.append(torch.full((n,), item.episode, dtype=torch.long))
        bounds.append(bounds[-1] + n)
    return Packed(
        tokens=torch.cat(tokens),
        positions=torch.cat(positions),
        labels=torch.cat(labels),
        loss_mask=torch.cat(mask),
        rollout_logprobs=torch.cat(rollout),
        advantages=torch.cat(adv),
        episodes=torch.cat(eps),
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32),
    )


def block_causal_mask(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """(1, 1, T, T) bool, True where attention is *not* allowed: a token sees earlier tokens of its own
    sample only (Megatron's mask convention; THD kernels derive the same from ``cu_seqlens``)."""
    total = int(cu_seqlens[-1])
    sample = torch.zeros(total, dtype=torch.long)
    for k in range(len(cu_seqlens) - 1):
        sample[int(cu_seqlens[k]) : int(cu_seqlens[k + 1])] = k
    same = sample.unsqueeze(0) == sample.unsqueeze(1)
    causal = torch.ones(total, total, dtype=torch.bool).tril()
    return ~(same & causal).view(1, 1, total, total)
