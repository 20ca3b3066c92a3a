"""``trainer.on_stale = "mask"``: the tokens past the off-policy bound leave the loss (they stay in the
context) and the rest of their group trains; a group with nothing left to train is still dropped as
stale, at its decision and again when it waited in the queue across a step. The default drops the group."""

from __future__ import annotations

import array
from pathlib import Path

import pytest

from consumers.trainer.config import trainer_config
from consumers.trainer.episodes.samples import NO_VERSION, Sample, assemble
from consumers.trainer.grpo.groups import DropReason, EpisodeResult, GroupDecision, GroupPolicy, decide
from consumers.trainer.grpo.stale_mask import fresh_mask, mask_episodes, mask_stale, newest_trained_version
from consumers.trainer.state import Queued, stale_in_queue
from consumers.trainer.stream.join import GroupState
from cua_stream.config import ConfigError
from cua_stream.events import CallKind, Logprobs, Reward, TokenIds, TurnEvent, VersionSpan


def turn(seq: int, parent: int | None, prompt: list[int], spans: list[tuple[int, int]]) -> TurnEvent:
    """A call whose completion is sampled in runs of (version, tokens), one token id per position."""
    n = sum(count for _, count in spans)
    tiles, at = [], 0
    for version, count in spans:
        tiles.append(VersionSpan(version=version, start=at, end=at + count))
        at += count
    return TurnEvent(
        run_id="r",
        group_id="g",
        episode_id="e",
        seq=seq,
        call_id=f"c{seq}",
        parent_call_id=None if parent is None else f"c{parent}",
        kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds(prompt),
        completion_ids=TokenIds(range(100 + 10 * seq, 100 + 10 * seq + n)),
        completion_logprobs=Logprobs([-0.1 * (i + 1) for i in range(n)]),
        weight_versions=tuple(tiles),
        policy_version=spans[0][0],
        finish_reason="stop",
        started_at=0.0,
    )


def one_sample(*calls: TurnEvent) -> Sample:
    (sample,) = assemble(calls).samples
    return sample


def test_the_keep_mask_drops_only_trained_tokens_past_the_bound() -> None:
    versions = array.array("i", [NO_VERSION, 3, 4, 5, NO_VERSION, 2, 6])
    mask = bytes([0, 1, 1, 1, 0, 1, 1])
    # at v6 with bound 2: v4 lags by 2 (kept), v3 by 3 and v2 by 4 (masked); prompts stay untrained
    assert fresh_mask(mask, versions, version=6, bound=2) == bytes([0, 0, 1, 1, 0, 0, 1])
    assert fresh_mask(mask, versions, version=6, bound=None) == mask  # no bound
    assert fresh_mask(mask, versions, version=2, bound=0) == bytes([0, 1, 1, 1, 0, 1, 1])  # none lags
    assert fresh_mask(bytes([1, 1]), array.array("i", [3, 4]), version=5, bound=0) == bytes([0, 0])
    with pytest.raises(ValueError, match="2 mask entries for 3"):
        fresh_mask(bytes([1, 1]), [1, 2, 3], version=5, bound=0)


def test_a_sample_keeps_its_context_and_trains_only_its_fresh_tokens() -> None:
    # a call sampled across a weight update (v1 then v3), then a call at v3
    sample = one_sample(turn(0, None, [1, 2], [(1, 2), (3, 1)]), turn(1, 0, [7], [(3, 2)]))
    assert list(sample.loss_mask) == [0, 0, 1, 1, 1, 0, 1, 1]
    masked, n = mask_stale(sample, version=3, bound=1)
    assert masked is not None and n == 2
    assert masked.tokens == sample.tokens and masked.token_versions == sample.token_versions  # context
    assert list(masked.loss_mask) == [0, 0, 0, 0, 1, 0, 1, 1]
    assert list(masked.rollout_logprobs) == pytest.approx([0, 0, 0, 0, -0.3, 0, -0.1, -0.2])
    assert (masked.trained_tokens, masked.oldest_version) == (3, 3)
    assert mask_stale(sample, version=2, bound=1) == (sample, 0)  # nothing past the bound: as it was
    assert mask_stale(sample, version=5, bound=1) == (None, 5)  # nothing left to train


def test_episodes_lose_the_samples_left_with_nothing_to_train_and_the_masked_tokens_are_counted() -> None:
    old, mixed = one_sample(turn(0, None, [1], [(0, 4)])), one_sample(turn(0, None, [1], [(0, 1), (2, 2)]))
    out, masked = mask_episodes({"a": (old, mixed), "b": (old,)}, version=3, bound=1)
    assert masked == 4 + 1 + 4
    assert [s.trained_tokens for s in out["a"]] == [2] and out["b"] == ()
    assert newest_trained_version([old, mixed]) == 2 and newest_trained_version([]) is None


def ep(i: int, reward: float, oldest: int, newest: int) -> EpisodeResult:
    return EpisodeResult(f"e{i}", Reward(value=reward), oldest_version=oldest, newest_version=newest)


def test_the_decision_masks_instead_of_dropping_only_under_the_option() -> None:
    # at v10 with bound 1: e0's oldest tokens are v7 (past it), its newest v10; e1 is all fresh
    group = [ep(0, 1.0, oldest=7, newest=10), ep(1, 0.0, oldest=9, newest=10)]
    dropped = decide(group, GroupPolicy(group_size=2, max_staleness=1), trainer_version=10)
    assert dropped is not None and dropped.reason is DropReason.STALE and "v7" in dropped.detail
    masked = GroupPolicy(group_size=2, max_staleness=1, on_stale="mask")
    trained = decide(group, masked, trainer_version=10)
    assert trained is not None and trained.train and set(trained.advantages) == {"e0", "e1"}
    # every trained token past the bound: nothing left to train, still stale
    old = [ep(0, 1.0, oldest=5, newest=8), ep(1, 0.0, oldest=6, newest=7)]
    stale = decide(old, masked, trainer_version=10)
    assert stale is not None and stale.reason is DropReason.STALE and "newest v8" in stale.detail
    # one episode all stale beside a fresh one: the group trains (the stale episode's reward still
    # sets the baseline; its tokens are masked at the step)
    assert decide([ep(0, 1.0, 3, 4), ep(1, 0.0, 9, 10)], masked, trainer_version=10).train  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="on_stale"):
        GroupPolicy(group_size=2, on_stale="keep")  # type: ignore[arg-type]


def queued(group_id: str, *samples: Sample) -> Queued:
    by_episode = {f"{group_id}-e{i}": (s,) for i, s in enumerate(samples)}
    decision = GroupDecision(advantages=dict.fromkeys(by_episode, 0.5))
    return Queued(GroupState(group_id, 0, 0.0), decision, by_episode)


def test_a_queued_group_under_mask_is_dropped_only_when_every_trained_token_aged_past_the_bound() -> None:
    mixed = queued("g1", one_sample(turn(0, None, [1], [(2, 1), (4, 1)])))
    old = queued("g2", one_sample(turn(0, None, [1], [(2, 2)])), one_sample(turn(0, None, [1], [(3, 1)])))
    keep, stale = stale_in_queue([mixed, old], version=5, bound=1, mask=True)
    assert [q.group.group_id for q in keep] == ["g1"]
    assert [why for _, why in stale] == [
        "queued across a step: every trained token is stale, newest v3 < v5 - 1"
    ]
    keep, stale = stale_in_queue([mixed, old], version=5, bound=1)  # the default drops both
    assert keep == [] and len(stale) == 2


def test_the_option_is_a_trainer_setting_named_in_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")
    base = {"trainer": {"run_id": "r", "model_path": str(tmp_path)}}
    monkeypatch.delenv("CUA_TRAINER_ON_STALE", raising=False)
    assert trainer_config(base).policy.on_stale == "drop_group"
    monkeypatch.setenv("CUA_TRAINER_ON_STALE", "mask")
    assert trainer_config(base).policy.on_stale == "mask"
    with pytest.raises(ConfigError, match="trainer.on_stale"):
        trainer_config(base, overrides={"on_stale": "trim"})
