"""The GRPO policy loss over packed tokens (torch tensors in, a scalar out; no model, no I/O).

Per trained token t of episode e, with the rollout logprob as the old one (the engine's, recorded by
the gateway, so no second forward pass is needed to get it):

    ratio_t = exp(logp_t - logp_rollout_t)
    loss_t  = -min(A_e * ratio_t, A_e * clip(ratio_t, 1 - clip_low, 1 + clip_high))

With ``tis_clip`` set (truncated importance sampling), the ratio is taken against the trainer's own
logprobs under the weights the step started from (``old_logprobs``: measured once per batch, before its
first update, and held for every pass: so a later pass's ratio shows how far the updates moved the
policy, and the clip bounds it) and each token's loss is weighted by the capped trainer/engine
probability ratio ``min(exp(logp_old - logp_rollout), tis_clip)``: the correction for an engine whose
numerics differ from the trainer's. Without ``old_logprobs`` (a single pass) they are the current
logprobs, detached.

With ``kl_coef`` > 0, each token also pays ``kl_coef`` times the k3 estimate of KL(policy || reference)
(DeepSeekMath's GRPO; the reference is the run's starting weights):

    kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1

non-negative, 0 where the two agree; its gradient pulls a token's logprob back toward the reference's.
An update from a handful of episodes moves shared weights in directions their advantages never chose;
the KL term is the force that pulls those moves back while the rewarded ones, repeated step after step,
stay.

Reduction (``LossConfig.reduction``):

- ``episode`` (GRPO's): a token mean per episode, then the mean over episodes. An episode with many
  samples (compactions) or long replies weighs as much as any other in its step.
- ``token`` (DAPO's token-level loss): the mean over every trained token of the step. Each token weighs
  the same, so the tokens a group's episodes share (the same reply prefix in the same context) cancel
  exactly, as their advantages sum to 0; under ``episode`` a short episode's tokens weigh more than a
  long one's, and a shared prefix is pushed by whichever side is shorter.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from consumers.trainer.grpo.loss_config import LossConfig


@dataclass(frozen=True)
class LossStats:
    loss: float
    clip_fraction: float
    """Share of trained tokens whose ratio was clipped."""
    logprob_gap: float
    """Mean |trainer logprob - engine logprob| over trained tokens (before this update)."""
    tokens: int
    kl: float = 0.0
    """Mean k3 KL to the reference over trained tokens (0 without ``kl_coef``)."""


def policy_loss(
    logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    episodes: torch.Tensor,
    config: LossConfig = LossConfig(),
    reference_logprobs: torch.Tensor | None = None,
    old_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The loss over packed tokens. All inputs are 1-D of the same length: the trainer's logprob of each
    token (with grad), the engine's, the token's episode advantage, the loss mask (1 = trained) and the
    token's episode index (0..E-1); with ``config.kl_coef``, the reference's logprob of each token."""
    if not (logprobs.shape == rollout_logprobs.shape == advantages.shape == mask.shape == episodes.shape):
        raise ValueError("policy_loss: every input must have the same 1-D shape")
    if config.kl_coef and (reference_logprobs is None or reference_logprobs.shape != logprobs.shape):
        raise ValueError("policy_loss: kl_coef needs the reference's logprob of every token")
    m = mask.to(logprobs.dtype)
    rollout = rollout_logprobs.to(logprobs.dtype)
    advantages = advantages.to(logprobs.dtype)
    if config.tis_clip is None:
        old = rollout
    elif old_logprobs is not None:
        if old_logprobs.shape != logprobs.shape:
            raise ValueError("policy_loss: old_logprobs must have the shape of logprobs")
        old = old_logprobs.to(logprobs.dtype).detach()
    else:
        old = logprobs.detach()
    ratio = torch.exp(logprobs - old)
    unclipped = advantages * ratio
    clipped = advantages * torch.clamp(ratio, 1 - config.clip_low, 1 + config.clip_high)
    per_token = -torch.minimum(unclipped, clipped)
    if config.tis_clip is not None:
        weight = torch.clamp(torch.exp(old - rollout), max=config.tis_clip)
        per_token = per_token * weight
    kl = torch.zeros_like(logprobs)
    if config.kl_coef and reference_logprobs is not None:
        log_ratio = reference_logprobs.to(logprobs.dtype) - logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1
        per_token = per_token + config.kl_coef * kl
    n_episodes = int(episodes.max().item()) + 1 if episodes.numel() else 0
    token_sum = torch.zeros(n_episodes, dtype=logprobs.dtype, device=logprobs.device).index_add(
        0, episodes, per_token * m
    )
    token_count = torch.zeros(n_episodes, dtype=logprobs.dtype, device=logprobs.device).index_add(
        0, episodes, m
    )
    has_tokens = token_count > 0
    trained = m.sum().clamp(min=1)
    if not has_tokens.any():
        loss = logprobs.sum() * 0
    elif config.reduction == "token":
        loss = token_sum.sum() / trained
    else:
        loss = (token_sum[has_tokens] / token_count[has_tokens]).mean()
    with torch.no_grad():
        was_clipped = ((ratio < 1 - config.clip_low) | (ratio > 1 + config.clip_high)).to(m.dtype)
        stats = LossStats(
            loss=float(loss.detach()),
            clip_fraction=float((was_clipped * m).sum() / trained),
            logprob_gap=float(((logprobs.detach() - rollout).abs() * m).sum() / trained),
            tokens=int(m.sum()),
            kl=float((kl.detach() * m).sum() / trained),
        )
    return loss, stats
