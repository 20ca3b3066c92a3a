"""Packed (Megatron THD-style) batches give the same GRPO loss and gradients as the samples one by one."""

from __future__ import annotations

import pytest
import torch

from consumers.trainer.backends.packing import block_causal_mask, pack
from consumers.trainer.backends.torch_backend import TrainItem
from consumers.trainer.episodes.samples import assemble
from consumers.trainer.grpo.loss import policy_loss
from cua_stream.engine.forward import token_logprobs
from tests.unit.test_trainer_samples import call

VOCAB = 64


def items() -> list[TrainItem]:
    a = assemble([call(0, None, [1, 2], [10, 11]), call(1, 0, [3], [12])]).samples[0]
    b = assemble([call(0, None, [5], [13, 14, 15])]).samples[0]
    c = assemble([call(0, None, [6, 7, 8], [16])]).samples[0]
    return [TrainItem(a, 0.7, 0), TrainItem(b, -0.3, 1), TrainItem(c, 0.7, 0)]


def test_packed_and_per_sample_losses_and_gradients_are_equal() -> None:
    torch.manual_seed(0)
    table = torch.randn(VOCAB, VOCAB, dtype=torch.float64)  # a bigram "model": logits from the current token

    def per_sample(weights: torch.Tensor) -> torch.Tensor:
        logps, rollout, mask, adv, eps = [], [], [], [], []
        for item in items():
            ids = torch.tensor(list(item.sample.tokens))
            logp = token_logprobs(weights[ids[:-1]], 1.0).gather(1, ids[1:, None]).squeeze(1)
            logps.append(torch.cat([logp.new_zeros(1), logp]))
            rollout.append(torch.tensor(list(item.sample.rollout_logprobs), dtype=torch.float64))
            mask.append(torch.tensor(list(item.sample.loss_mask)))
            adv.append(torch.full((len(ids),), item.advantage, dtype=torch.float64))
            eps.append(torch.full((len(ids),), item.episode))
        return policy_loss(*(torch.cat(x) for x in (logps, rollout, adv, mask, eps)))[0]

    def packed(weights: torch.Tensor) -> torch.Tensor:
        p = pack(items())
        logp = token_logprobs(weights[p.tokens], 1.0).gather(1, p.labels[:, None]).squeeze(1)
        return policy_loss(logp, p.rollout_logprobs.double(), p.advantages.double(), p.loss_mask, p.episodes)[
            0
        ]

    w1, w2 = table.clone().requires_grad_(), table.clone().requires_grad_()
    loss1, loss2 = per_sample(w1), packed(w2)
    assert loss1.item() == pytest.approx(loss2.item(), abs=1e-12)
    loss1.backward()
    loss2.backward()
    assert torch.allclose(w1.grad, w2.grad, atol=1e-12)


def test_packing_layout() -> None:
    p = pack(items())
    # samples: [1, 2, 10, 11, 3, 12], [5, 13, 14, 15], [6, 7, 8, 16]
    assert p.cu_seqlens.tolist() == [0, 6, 10, 14]
    assert p.positions.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2, 3]
    assert p.labels[:6].tolist() == [2, 10, 11, 3, 12, 0]  # next tokens, none after the sample's end
    assert p.loss_mask.tolist() == [0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0]
    mask = block_causal_mask(p.cu_seqlens)[0, 0]
    assert not mask[5, 0] and mask[6, 5] and not mask[9, 6] and mask[6, 7]  # own sample, earlier only
