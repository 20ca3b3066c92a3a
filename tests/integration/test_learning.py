"""GRPO learns: on a toy task, a few steps raise the probability of the rewarded action; the same test
fails when the advantage's sign is flipped or the loss mask is shifted by one token.

The toy task is a computer-use decision cut to its core: a screenshot (a red button on the left), the
question "which button?", and a one-token reply (``left`` or ``right``) — the completion the engine
returns with ``max_new_tokens=1``. Everything between the reply and the update is the real path: the
prompt rendered by the gateway's renderer through the real processor (image pads included), the group's
replies recorded as turn records, ``assemble`` (loss masks), ``groups.decide`` (advantages), the torch
backend's step (the packed GRPO loss). Each step is on-policy: the rollout logprobs are the policy's own.

The reply is one token on purpose: it makes the test sensitive to an off-by-one mask in both
directions (shifted left, the mask covers the last prompt token; shifted right, nothing).
"""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from PIL import Image

from consumers.trainer.backends.torch_backend import StepStats, TorchBackend, TrainItem
from consumers.trainer.episodes.samples import Sample, assemble
from consumers.trainer.grpo.groups import EpisodeResult, GroupPolicy, decide
from consumers.trainer.grpo.loss import LossConfig
from cua_stream.blobs import LocalBlobStore
from cua_stream.events import CallKind, Logprobs, Reward, TokenIds, TurnEvent
from cua_stream.gateway.messages import parse_messages
from cua_stream.gateway.rendering import Renderer
from tests.integration.gateway_servers import tiny_model_dir
from tests.unit.gateway_support import user_turn

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.model, pytest.mark.slow]

GROUP = ("left", "left", "right", "right")
"""The group's replies (as if sampled): two take the rewarded action, two the other."""
STEPS = 4
MUTATIONS = ("none", "flipped_advantage", "mask_shifted_left", "mask_shifted_right")


def screenshot() -> str:
    img = Image.new("RGB", (320, 192), (235, 235, 235))
    img.paste((220, 30, 30), (30, 70, 130, 120))  # the red button, on the left
    img.paste((30, 30, 220), (190, 70, 290, 120))
    out = io.BytesIO()
    img.save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def shifted(mask: bytes, by: int) -> bytes:
    """``mask`` moved ``by`` tokens (negative: earlier), zero-filled."""
    if by < 0:
        return mask[-by:] + b"\x00" * -by
    return b"\x00" * by + mask[:-by]


class ToyTask:
    def __init__(self, model_dir: Path, blobs: LocalBlobStore) -> None:
        renderer = Renderer.from_pretrained(str(model_dir))
        messages = parse_messages([user_turn("Click the red button. Reply left or right.", screenshot())])
        delta = renderer.render_delta(messages, after_completion=None)
        data, self.image = delta.images[0].stored()
        blobs.put(data)
        self.prompt = TokenIds(delta.ids)
        tokenizer = renderer.tokenizer
        self.action = {}
        for word in ("left", "right"):
            (token,) = tokenizer.encode(word, add_special_tokens=False)
            self.action[word] = token

    def record(self, episode: int, word: str, logprob: float, version: int) -> TurnEvent:
        """The turn record the gateway would publish for this reply."""
        return TurnEvent(
            run_id="learn",
            group_id=f"g{version}",
            episode_id=f"e{episode}",
            seq=0,
            call_id=f"c{version}-{episode}",
            kind=CallKind.AGENT_TURN,
            prompt_ids=self.prompt,
            completion_ids=TokenIds([self.action[word]]),
            completion_logprobs=Logprobs([logprob]),
            images=(self.image,),
            policy_version=version,
            finish_reason="length",
            started_at=0.0,
        )


def action_logprobs(backend: TorchBackend, task: ToyTask) -> dict[str, float]:
    """The policy's logprob of each action at the decision point."""
    out = {}
    for word in task.action:
        probe = task.record(0, word, 0.0, 0)
        (sample,) = assemble([probe]).samples
        with torch.no_grad():
            out[word] = float(backend.token_logprobs(sample)[-1])
    return out


def grpo_steps(
    backend: TorchBackend, task: ToyTask, mutation: str, negative_scale: float = 1.0
) -> list[StepStats]:
    stats = []
    for version in range(STEPS):
        now = action_logprobs(backend, task)  # on-policy: the rollout logprobs are the policy's own
        records = [task.record(i, word, now[word], version) for i, word in enumerate(GROUP)]
        rewards = {
            r.episode_id: 1.0 if word == "left" else 0.0 for r, word in zip(records, GROUP, strict=True)
        }
        decision = decide(
            [EpisodeResult(e, Reward(value=v), version) for e, v in rewards.items()],
            GroupPolicy(group_size=len(GROUP), negative_scale=negative_scale),
            trainer_version=version,
        )
        assert decision is not None and decision.train
        items = []
        for index, record in enumerate(records):
            (sample,) = assemble([record]).samples
            advantage = decision.advantages[record.episode_id]
            items.append(TrainItem(mutate(sample, mutation), mutate_advantage(advantage, mutation), index))
        stats.append(backend.step(items))
    return stats


def mutate(sample: Sample, mutation: str) -> Sample:
    if mutation == "mask_shifted_left":
        return replace(sample, loss_mask=shifted(sample.loss_mask, -1))
    if mutation == "mask_shifted_right":
        return replace(sample, loss_mask=shifted(sample.loss_mask, 1))
    return sample


def mutate_advantage(advantage: float, mutation: str) -> float:
    return -advantage if mutation == "flipped_advantage" else advantage


def learns(before: dict[str, float], after: dict[str, float]) -> bool:
    """The rewarded action became clearly more likely, absolutely and against the other one."""
    gained = after["left"] - before["left"]
    margin = (after["left"] - after["right"]) - (before["left"] - before["right"])
    return gained > 0.5 and margin > 1.0


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_grpo_raises_the_rewarded_action_and_a_broken_update_does_not(
    mutation: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    blobs = LocalBlobStore(tmp_path / "blobs")
    task = ToyTask(tiny_model_dir, blobs)
    backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3)
    before = action_logprobs(backend, task)
    grpo_steps(backend, task, mutation)
    after = action_logprobs(backend, task)
    assert learns(before, after) == (mutation == "none"), (mutation, before, after)


def one_step_gain(model_dir: Path, blobs: LocalBlobStore, passes: int) -> tuple[float, float]:
    """The rewarded action's logprob gain after one GRPO step of ``passes`` updates, and the step's
    reported clip fraction."""
    torch.manual_seed(0)
    task = ToyTask(model_dir, blobs)
    backend = TorchBackend(model_dir, blobs, lr=1e-3, passes=passes)
    before = action_logprobs(backend, task)
    records = [task.record(i, word, before[word], 0) for i, word in enumerate(GROUP)]
    advantages = [1.0 if word == "left" else -1.0 for word in GROUP]
    items = [
        TrainItem(assemble([r]).samples[0], a, i)
        for i, (r, a) in enumerate(zip(records, advantages, strict=True))
    ]
    stats = backend.step(items)
    assert stats.loss.logprob_gap < 1e-4  # the first pass is on-policy: the statistics are its own
    return action_logprobs(backend, task)["left"] - before["left"], stats.loss.clip_fraction


def test_more_passes_on_a_batch_move_the_policy_further_until_the_clip_holds_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    one, one_clipped = one_step_gain(tiny_model_dir, blobs, passes=1)
    four, four_clipped = one_step_gain(tiny_model_dir, blobs, passes=4)
    assert 0 < one < four, (one, four)
    assert one_clipped == 0.0 < four_clipped  # by the last pass the ratios left the clip range
    assert four < 2 * one  # ... and it held them: three more passes moved less than the first


def test_the_kl_term_holds_the_policy_near_its_start(tiny_model_dir: Path, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    gains, kls = {}, {}
    for coef in (0.0, 0.5):
        torch.manual_seed(0)
        task = ToyTask(tiny_model_dir, blobs)
        backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3, loss=LossConfig(kl_coef=coef))
        before = action_logprobs(backend, task)
        kls[coef] = [s.loss.kl for s in grpo_steps(backend, task, "none")]
        gains[coef] = action_logprobs(backend, task)["left"] - before["left"]
    assert kls[0.0] == [0.0] * STEPS  # off: no reference, nothing measured
    assert kls[0.5][0] == pytest.approx(0.0, abs=1e-9)  # the first step's policy is the reference
    assert 0 < kls[0.5][1] < kls[0.5][-1]  # the policy moves away, the KL measures it
    assert 0 < gains[0.5] < gains[0.0], gains  # still learns, held back
    # a step whose groups carry no reward signal still pays the KL, and takes it: back toward the start
    records = [task.record(i, word, 0.0, STEPS) for i, word in enumerate(GROUP)]
    items = [TrainItem(assemble([r]).samples[0], 0.0, i) for i, r in enumerate(records)]
    drifted = backend.step(items).loss.kl
    assert backend.step(items).loss.kl < drifted


def test_without_negative_advantages_the_winners_alone_raise_the_rewarded_action(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    blobs = LocalBlobStore(tmp_path / "blobs")
    task = ToyTask(tiny_model_dir, blobs)
    backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3)
    before = action_logprobs(backend, task)
    weights = [p.detach().clone() for p in backend.model.parameters()]
    # the losers alone: under negative_scale 0 their advantages are 0 and the weights do not move
    version = 0
    records = [task.record(i, "right", before["right"], version) for i in range(2)]
    losers = decide(
        [EpisodeResult(r.episode_id, Reward(value=0.0), version) for r in records]
        + [EpisodeResult(f"w{i}", Reward(value=1.0), version) for i in range(2)],
        GroupPolicy(group_size=4, negative_scale=0.0),
        trainer_version=version,
    )
    assert losers is not None
    backend.step(
        [
            TrainItem(assemble([r]).samples[0], losers.advantages[r.episode_id], i)
            for i, r in enumerate(records)
        ]
    )
    assert all(torch.equal(a, b) for a, b in zip(weights, backend.model.parameters(), strict=True))
    grpo_steps(backend, task, "none", negative_scale=0.0)
    assert learns(before, action_logprobs(backend, task))


def test_a_step_without_reward_signal_turns_back_rather_than_replaying_the_last_update(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    blobs = LocalBlobStore(tmp_path / "blobs")
    task = ToyTask(tiny_model_dir, blobs)
    backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3, loss=LossConfig(kl_coef=0.5))

    def weights() -> torch.Tensor:
        return torch.cat([p.detach().flatten().clone() for p in backend.model.parameters()])

    start = weights()
    grpo_steps(backend, task, "none")  # rewarded updates: AdamW's momentum points their way
    moved = weights()
    # every group of the batch won (or lost) alike: no reward signal, only the KL anchor's gradient
    records = [task.record(i, "left", 0.0, STEPS) for i in range(len(GROUP))]
    backend.step([TrainItem(assemble([r]).samples[0], 0.0, i) for i, r in enumerate(records)])
    turn = torch.nn.functional.cosine_similarity(moved - start, weights() - moved, dim=0)
    # with AdamW's momentum kept, this step went on the same way (cosine 0.47, longer than a rewarded step)
    assert turn < 0, float(turn)
