"""The GRPO policy loss against hand-computed values: PPO clipping on both sides, masked tokens, the
token mean per episode, truncated importance sampling, and the direction of the gradient."""

from __future__ import annotations

import math

import pytest
import torch

from consumers.trainer.grpo.loss import LossConfig, policy_loss


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_on_policy_the_loss_is_minus_the_mean_episode_advantage_and_each_episode_weighs_the_same() -> None:
    logp = t(-1.0, -2.0, -0.5).requires_grad_()
    loss, stats = policy_loss(
        logp, t(-1.0, -2.0, -0.5), t(1.0, 1.0, -1.0), t(1, 1, 1), torch.tensor([0, 0, 1])
    )
    assert loss.item() == pytest.approx(0.0)  # episode 0: -1, episode 1: +1
    loss.backward()
    # d/dlogp of -A * ratio at ratio 1 is -A, divided by the episode's token count and the episode count
    assert logp.grad.tolist() == pytest.approx([-0.25, -0.25, 0.5])
    assert stats.tokens == 3 and stats.logprob_gap == 0.0 and stats.clip_fraction == 0.0


def test_ratios_are_clipped_asymmetrically_for_positive_advantages_only_where_it_helps() -> None:
    up = math.log(1.5)  # ratio 1.5
    logp = t(up, up, -up).requires_grad_()
    loss, stats = policy_loss(logp, t(0, 0, 0), t(1.0, -1.0, -1.0), t(1, 1, 1), torch.tensor([0, 1, 2]))
    # A=+1, r=1.5: clipped at 1.28 -> -1.28 (no gradient); A=-1, r=1.5: -min(-1.5, -1.28) = 1.5;
    # A=-1, r=1/1.5: clipped at 0.8 -> -min(-0.667, -0.8) = 0.8 (no gradient)
    assert loss.item() == pytest.approx((-1.28 + 1.5 + 0.8) / 3)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, 1.5 / 3, 0.0])
    assert stats.clip_fraction == pytest.approx(1.0)


def test_masked_tokens_count_for_nothing() -> None:
    logp = t(-1.0, -5.0).requires_grad_()
    loss, stats = policy_loss(logp, t(-1.0, 0.0), t(2.0, 2.0), t(1, 0), torch.tensor([0, 0]))
    assert loss.item() == pytest.approx(-2.0) and stats.tokens == 1 and stats.logprob_gap == 0.0
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-2.0, 0.0])


def test_truncated_importance_sampling_weights_by_the_capped_trainer_engine_ratio() -> None:
    logp = t(math.log(4.0), 0.0).requires_grad_()  # the trainer gives the first token 4x the engine's
    config = LossConfig(tis_clip=2.0)
    loss, stats = policy_loss(logp, t(0.0, 0.0), t(1.0, 1.0), t(1, 1), torch.tensor([0, 1]), config)
    assert loss.item() == pytest.approx((-1.0 * 2.0 + -1.0 * 1.0) / 2)  # weights min(4, 2) and 1
    assert stats.logprob_gap == pytest.approx(math.log(4.0) / 2)


def test_a_step_raises_the_probability_of_the_advantaged_token() -> None:
    logits = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([logits], lr=0.5)
    for _ in range(3):
        logp = torch.log_softmax(logits, -1)[[0, 1]].double()
        loss, _ = policy_loss(logp, logp.detach(), t(1.0, -1.0), t(1, 1), torch.tensor([0, 1]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    probs = torch.softmax(logits, -1)
    assert probs[0] > 1 / 3 > probs[1]


def test_inputs_must_line_up() -> None:
    with pytest.raises(ValueError, match="same"):
        policy_loss(t(1.0), t(1.0, 2.0), t(1.0), t(1), torch.tensor([0]))


def test_the_token_reduction_weighs_every_token_alike_so_a_shared_prefix_cancels() -> None:
    # two episodes of one group, A = +1 and -1; token 0 of each is the same prefix token in the same context
    logp = t(-0.5, -1.0, -0.5, -2.0, -3.0).requires_grad_()
    episodes = torch.tensor([0, 0, 1, 1, 1])
    args = (logp.detach(), t(1.0, 1.0, -1.0, -1.0, -1.0), t(1, 1, 1, 1, 1), episodes)
    loss, _ = policy_loss(logp, *args, LossConfig(reduction="token"))
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-0.2, -0.2, 0.2, 0.2, 0.2])
    assert logp.grad[0] + logp.grad[2] == pytest.approx(0.0)  # the shared prefix: no net push
    logp.grad = None
    loss, _ = policy_loss(logp, *args)  # episode means: the shorter (rewarded) episode's prefix wins
    loss.backward()
    assert logp.grad[0] + logp.grad[2] == pytest.approx(-0.25 + 1 / 6)
    with pytest.raises(ValueError, match="reduction"):
        LossConfig(reduction="sum")  # type: ignore[arg-type]


def test_the_kl_term_is_k3_to_the_reference_and_pulls_a_token_back_to_it() -> None:
    logp = t(-1.0, -2.0).requires_grad_()
    reference = t(-1.5, -2.0)
    config = LossConfig(kl_coef=0.5, reduction="token")
    loss, stats = policy_loss(
        logp, t(-1.0, -2.0), t(0.0, 0.0), t(1, 1), torch.tensor([0, 0]), config, reference
    )
    k3 = math.exp(-0.5) + 0.5 - 1  # exp(ref - logp) - (ref - logp) - 1 for the first token; 0 for the second
    assert loss.item() == pytest.approx(0.5 * k3 / 2) and stats.kl == pytest.approx(k3 / 2)
    loss.backward()
    # descent lowers the first token's logprob toward the reference's; the second sits on it
    assert logp.grad.tolist() == pytest.approx([0.5 * (1 - math.exp(-0.5)) / 2, 0.0])
    with pytest.raises(ValueError, match="kl_coef needs the reference"):
        policy_loss(logp, t(-1.0, -2.0), t(0.0, 0.0), t(1, 1), torch.tensor([0, 0]), config)
    with pytest.raises(ValueError, match="kl_coef: 0 \\(off\\) or more"):
        LossConfig(kl_coef=-0.1)


def test_with_tis_the_old_logprobs_are_the_steps_start_so_a_later_pass_is_clipped() -> None:
    """A second pass over the batch: the trainer's logprobs moved +0.5 nat from where the step started.
    Against the step's start (``old_logprobs``) the ratio is e^0.5 = 1.65, past 1 + clip_high, so the
    clip bounds the pass; the importance weight is the start's ratio to the engine (e^0.1 here)."""
    config = LossConfig(tis_clip=2.0)
    start, rollout = t(-1.0, -2.0), t(-1.1, -2.1)
    moved = (start + 0.5).requires_grad_()
    loss, stats = policy_loss(moved, rollout, t(1.0, 1.0), t(1, 1), torch.tensor([0, 0]), config,
                              old_logprobs=start)  # fmt: skip
    assert stats.clip_fraction == 1.0
    assert loss.item() == pytest.approx(-(1 + config.clip_high) * math.exp(0.1))
    loss.backward()
    assert moved.grad.tolist() == [0.0, 0.0]  # clipped: no further push in the advantage's direction

    _, one_pass = policy_loss(moved.detach(), rollout, t(1.0, 1.0), t(1, 1), torch.tensor([0, 0]), config)
    assert one_pass.clip_fraction == 0.0  # without them (one pass) the ratio is 1 by construction
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(moved, rollout, t(1.0, 1.0), t(1, 1), torch.tensor([0, 0]), config, old_logprobs=t(0.0))
