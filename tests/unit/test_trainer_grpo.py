"""GRPO decisions and advantages against hand-computed cases: unbiased std, discard policies, the
off-policy bound, the zero-variance filter, timeouts, and steps that never split a group."""

from __future__ import annotations

import math

import pytest

from consumers.trainer.grpo.groups import (
    MAX_REWARD,
    DropReason,
    EpisodeResult,
    GroupPolicy,
    ReadyGroup,
    advantages,
    carries_signal,
    decide,
    next_batch,
)
from cua_stream.events import Discard, Reward


def ep(i: int, reward: float | None, version: int = 5, discard: str = "sandbox_lost") -> EpisodeResult:
    verdict = Discard(reason=discard) if reward is None else Reward(value=reward)
    return EpisodeResult(episode_id=f"e{i}", verdict=verdict, oldest_version=version)


def test_advantages_use_the_unbiased_std_over_episodes() -> None:
    # rewards 1, 0, 0, 1: mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = 0.57735
    adv = advantages({"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0})
    assert adv["a"] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-6))
    assert adv["b"] == pytest.approx(-0.5 / (math.sqrt(1 / 3) + 1e-6))
    # rewards 3, 1: mean 2, unbiased std sqrt(2) (the biased one would be 1)
    assert advantages({"x": 3.0, "y": 1.0})["x"] == pytest.approx(1 / (math.sqrt(2) + 1e-6))
    assert advantages({"x": 3.0, "y": 1.0}, std_normalize=False) == {"x": 1.0, "y": -1.0}
    assert advantages({"x": 0.7}) == {"x": 0.0}  # one episode: no std
    assert advantages({"a": 1.0, "b": 1.0}) == {"a": 0.0, "b": 0.0}  # zero std: eps keeps it finite
    with pytest.raises(ValueError, match="finite"):
        advantages({"a": float("nan"), "b": 0.0})


def test_negative_scale_weighs_only_the_episodes_under_their_group_mean() -> None:
    # rewards 1, 0, 0, 0: mean 0.25 (r - mean: 0.75, -0.25), unbiased std 0.5
    rewards = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0}
    grpo = advantages(rewards, std_normalize=False)
    assert grpo == {"a": 0.75, "b": -0.25, "c": -0.25, "d": -0.25}
    assert advantages(rewards, std_normalize=False, negative_scale=0.4) == {
        "a": 0.75, "b": -0.1, "c": -0.1, "d": -0.1,
    }  # fmt: skip
    winners = advantages(rewards, negative_scale=0.0)
    assert winners["a"] == pytest.approx(0.75 / (0.5 + 1e-6))
    assert [winners[k] for k in "bcd"] == [0.0, 0.0, 0.0]
    # a group that all failed, or all won, still has no signal; decide passes the scale through
    assert advantages({"a": 0.0, "b": 0.0}, negative_scale=0.0) == {"a": 0.0, "b": 0.0}
    decision = decide(
        [ep(i, r) for i, r in enumerate((1.0, 0.0, 0.0, 1.0))],
        GroupPolicy(group_size=4, negative_scale=0.0),
        trainer_version=5,
    )
    assert decision is not None and decision.train
    assert decision.advantages["e1"] == decision.advantages["e2"] == 0.0 < decision.advantages["e0"]


def test_a_step_has_a_gradient_when_an_advantage_is_not_0_or_a_kl_anchors_it() -> None:
    assert carries_signal([0.0, 1.5, -0.5])
    assert not carries_signal([0.0, 0.0])
    assert carries_signal([0.0, 0.0], kl_anchor=True)


def test_a_group_waits_for_all_its_episodes_then_times_out_with_a_reason() -> None:
    policy = GroupPolicy(group_size=3)
    assert decide([ep(0, 1.0), ep(1, 0.0)], policy, trainer_version=5) is None
    timed_out = decide([ep(0, 1.0), ep(1, 0.0)], policy, trainer_version=5, timed_out=True)
    assert timed_out is not None and timed_out.reason is DropReason.TIMEOUT and "2 of 3" in timed_out.detail


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1.7e308, -1e10, MAX_REWARD * 1.01])
def test_a_reward_that_is_not_a_finite_number_within_bounds_drops_the_group_as_invalid(value: float) -> None:
    # The scorer turns a NaN from a verifier into 0 (invalid_reward); a score written by anyone else
    # reaches the trainer as it is: before, advantages() raised and the trainer crash-looped on it, and
    # 1.7e308 overflowed the group's mean (a bare OverflowError as the drop's detail)
    decision = decide([ep(0, 1.0), ep(1, value), ep(2, 0.0)], GroupPolicy(group_size=3), trainer_version=5)
    assert decision is not None and decision.reason is DropReason.INVALID_RECORDS and not decision.train
    assert decision.detail == "reward: the reward of e1 is not a finite number within ±1e+09"


def test_rewards_at_the_bound_train_and_their_advantages_are_finite() -> None:
    for policy in (GroupPolicy(group_size=2), GroupPolicy(group_size=2, std_normalize=False)):
        decision = decide([ep(0, MAX_REWARD), ep(1, -MAX_REWARD)], policy, trainer_version=5)
        assert decision is not None and decision.train
        assert all(math.isfinite(a) for a in decision.advantages.values())
    every = decide([ep(0, 1.7e308), ep(1, 1.7e308)], GroupPolicy(group_size=2), trainer_version=5)
    assert every is not None and every.detail.endswith(
        "the reward of e0, e1 is not a finite number within ±1e+09"
    )


def test_a_discard_drops_the_whole_group_by_default() -> None:
    decision = decide([ep(0, 1.0), ep(1, None), ep(2, 0.0)], GroupPolicy(group_size=3), trainer_version=5)
    assert decision is not None and decision.reason is DropReason.DISCARDED
    assert decision.detail == "sandbox_lost" and not decision.train


def test_keep_survivors_trains_the_rewarded_episodes_when_enough_remain() -> None:
    policy = GroupPolicy(group_size=4, on_discard="keep_survivors", min_survivors=2)
    ok = decide([ep(0, 1.0), ep(1, None), ep(2, 0.0), ep(3, 0.0)], policy, trainer_version=5)
    assert ok is not None and ok.train and set(ok.advantages) == {"e0", "e2", "e3"}
    assert ok.advantages["e0"] == pytest.approx((1 - 1 / 3) / (math.sqrt(1 / 3) + 1e-6))
    few = decide([ep(0, 1.0), ep(1, None), ep(2, None), ep(3, None)], policy, trainer_version=5)
    assert few is not None and few.reason is DropReason.TOO_FEW_SURVIVORS


def test_the_off_policy_bound_drops_stale_groups() -> None:
    policy = GroupPolicy(group_size=2, max_staleness=2)
    fresh = decide([ep(0, 1.0, version=8), ep(1, 0.0, version=9)], policy, trainer_version=10)
    assert fresh is not None and fresh.train
    stale = decide([ep(0, 1.0, version=7), ep(1, 0.0, version=9)], policy, trainer_version=10)
    assert stale is not None and stale.reason is DropReason.STALE and "v7" in stale.detail
    unbounded = decide([ep(0, 1.0, version=0), ep(1, 0.0)], GroupPolicy(group_size=2), trainer_version=99)
    assert unbounded is not None and unbounded.train


def test_a_kept_groups_staleness_counts_its_discarded_episodes_too() -> None:
    # as the reference's group staleness (current - the group's oldest weight version): the discarded
    # episode's tokens are the group's oldest
    policy = GroupPolicy(group_size=3, on_discard="keep_survivors", min_survivors=2, max_staleness=2)
    group = [ep(0, 1.0, version=9), ep(1, 0.0, version=9), ep(2, None, version=6)]
    stale = decide(group, policy, trainer_version=10)
    assert stale is not None and stale.reason is DropReason.STALE and "v6" in stale.detail


def test_the_zero_variance_filter_is_optional() -> None:
    same = [ep(0, 1.0), ep(1, 1.0)]
    assert decide(same, GroupPolicy(group_size=2), trainer_version=5).train  # type: ignore[union-attr]
    filtered = decide(same, GroupPolicy(group_size=2, filter_zero_variance=True), trainer_version=5)
    assert filtered is not None and filtered.reason is DropReason.ZERO_VARIANCE


def test_a_step_takes_whole_groups_up_to_the_episode_count() -> None:
    ready = [ReadyGroup("g0", 4), ReadyGroup("g1", 4), ReadyGroup("g2", 3), ReadyGroup("g3", 4)]
    assert next_batch(ready, 8) == 2  # 4 + 4
    assert next_batch(ready[1:], 8) == 2  # 4 + 3: the next group would overflow the step
    assert next_batch(ready[:1], 8) == 0  # not enough ready yet
    assert next_batch(ready[:1], 8, flush=True) == 1
    assert next_batch([ReadyGroup("big", 12)], 8) == 1  # a group larger than a step goes alone
    assert next_batch([], 8, flush=True) == 0


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        GroupPolicy(group_size=0)
    with pytest.raises(ValueError):
        GroupPolicy(group_size=2, max_staleness=-1)
    for epsilon in (0.0, -1e-6, float("nan"), float("inf")):  # 0: a zero-variance group divides by 0
        with pytest.raises(ValueError, match="epsilon"):
            GroupPolicy(group_size=2, epsilon=epsilon)
    for scale in (-0.5, float("nan")):
        with pytest.raises(ValueError, match="negative_scale"):
            GroupPolicy(group_size=2, negative_scale=scale)
