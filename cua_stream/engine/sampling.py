"""Drawing one token under SGLang ``sampling_params`` (parsed and validated in ``params``)."""

from __future__ import annotations

import torch

from cua_stream.engine.forward import token_logprobs
from cua_stream.engine.params import SamplingParams


def draw(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[int, float]:
    """Draw the next token from ``logits`` (vocab,); return it with its logprob (see forward.py)."""
    logp = token_logprobs(logits, params.temperature)
    if params.greedy:
        token = int(torch.argmax(logp))
        return token, float(logp[token])
    probs = logp.exp()
    if params.top_k > 0:
        kth = torch.topk(probs, min(params.top_k, probs.numel())).values[-1]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, 0) - sorted_probs  # mass strictly above each token
        sorted_probs[before > params.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    if params.min_p > 0:
        probs = torch.where(probs < params.min_p * probs.max(), torch.zeros_like(probs), probs)
    token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
    return token, float(logp[token])
