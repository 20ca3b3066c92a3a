"""The Megatron backend's step on CPU, with megatron-core's real GPTModel (two shims make its model code
run without CUDA; its optimizer and schedules need a GPU and are not used): the packed forward equals the
samples one by one, and so does the GRPO loss the torch backend computes from them; a step changes the
weights."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from consumers.trainer.backends.megatron_backend import MegatronBackend
from consumers.trainer.grpo.loss import LossConfig, policy_loss
from cua_stream.engine.forward import token_logprobs
from tests.conftest import free_port
from tests.unit.test_trainer_packing import items

pytestmark = [
    pytest.mark.slow,
    # megatron-core's own deprecation notices (tp_group defaults), raised inside its forward
    pytest.mark.filterwarnings("ignore::DeprecationWarning:megatron.*"),
]
VOCAB = 64


@pytest.fixture(scope="module")
def gpt() -> Iterator[Any]:
    """A 2-layer megatron-core GPTModel on CPU: gloo, TP = PP = 1, and the two shims (the CUDA device
    query answers "cpu"; the CUDA RNG tracker's fork is a no-op), undone afterwards."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    current_device = torch.cuda.current_device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # megatron-core warns that Apex / Transformer Engine are missing
        from megatron.core import parallel_state
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.tensor_parallel import random as mrandom
        from megatron.core.transformer.transformer_config import TransformerConfig

        parallel_state.initialize_model_parallel(1, 1)
        torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment,return-value]
        mrandom.initialize_rng_tracker()
        tracker = mrandom.get_cuda_rng_tracker()
        fork = tracker.fork
        tracker.fork = lambda *a, **k: contextlib.nullcontext()
        torch.manual_seed(0)
        config = TransformerConfig(
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            use_cpu_initialization=True,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            bias_dropout_fusion=False,
            gradient_accumulation_fusion=False,
            masked_softmax_fusion=False,
            persist_layer_norm=False,
            apply_rope_fusion=False,
        )
        model = GPTModel(
            config=config,
            transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=VOCAB,
            max_sequence_length=64,
            position_embedding_type="rope",
        )
    try:
        yield model
    finally:
        tracker.fork = fork
        torch.cuda.current_device = current_device  # type: ignore[assignment]
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def per_sample_loss(model: Any) -> torch.Tensor:
    """The torch backend's way: each sample alone, its token logprobs, then the packed loss."""
    logps, rollout, mask, adv, eps = [], [], [], [], []
    for item in items():
        ids = torch.tensor([list(item.sample.tokens)])
        n = ids.shape[1]
        causal = ~torch.ones(n, n, dtype=torch.bool).tril().view(1, 1, n, n)
        logits = model(input_ids=ids, position_ids=torch.arange(n)[None], attention_mask=causal)[0]
        logp = token_logprobs(logits[:-1], 1.0).gather(1, ids[0, 1:, None]).squeeze(1)
        logps.append(torch.cat([logp.new_zeros(1), logp]))
        rollout.append(torch.tensor(list(item.sample.rollout_logprobs)))
        mask.append(torch.tensor(list(item.sample.loss_mask)))
        adv.append(torch.full((n,), item.advantage))
        eps.append(torch.full((n,), item.episode))
    return policy_loss(*(torch.cat(x) for x in (logps, rollout, adv, mask, eps)))[0]


def test_a_packed_megatron_step_matches_the_samples_one_by_one(gpt: Any) -> None:
    backend = MegatronBackend(gpt, torch.optim.AdamW(gpt.parameters(), lr=1e-2))
    packed_logp, p = backend.packed_logprobs(items())
    packed = policy_loss(packed_logp, p.rollout_logprobs, p.advantages, p.loss_mask, p.episodes)[0]
    assert packed.item() == pytest.approx(per_sample_loss(gpt).item(), abs=1e-5)
    before = [q.detach().clone() for q in gpt.parameters()]
    stats = backend.step(items())
    assert stats.grad_norm > 0 and stats.loss.tokens == 7 and stats.episodes == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, gpt.parameters(), strict=True))


def test_a_kl_coefficient_is_refused_by_the_backend_that_keeps_no_reference(gpt: Any) -> None:
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="kl_coef: the torch backend's"):
        MegatronBackend(gpt, optimizer, loss=LossConfig(kl_coef=0.1))
