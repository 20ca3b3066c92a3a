"""The torch backend on the tiny Qwen3-VL: the trainer's logprobs equal the engine's on the engine's own
completion (images from the blob store through the real processor), a step with a positive advantage
raises the sampled tokens' probability (a negative one lowers it), and the saved weights load into the
engine."""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
import torch
from PIL import Image

from consumers.trainer.backends.torch_backend import TorchBackend, TrainItem
from consumers.trainer.episodes.samples import assemble
from consumers.trainer.grpo.loss import LossConfig
from cua_stream.blobs import LocalBlobStore
from cua_stream.engine.params import SamplingParams
from cua_stream.engine.runner import ModelRunner
from cua_stream.events import CallKind, Logprobs, TokenIds, TurnEvent
from cua_stream.gateway.messages import parse_messages
from cua_stream.gateway.rendering import Renderer
from tests.integration.gateway_servers import tiny_model_dir
from tests.unit.gateway_support import user_turn

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = pytest.mark.model


def screenshot_png() -> bytes:
    img = Image.new("RGB", (320, 192), (30, 90, 200))
    img.paste((250, 250, 250), (40, 40, 140, 90))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def one_turn(model_dir: Path, blobs: LocalBlobStore) -> tuple[TurnEvent, ModelRunner]:
    """One agent turn as the gateway would record it: a screenshot prompt and the engine's reply."""
    renderer = Renderer.from_pretrained(str(model_dir))
    png = screenshot_png()
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    messages = parse_messages([user_turn("Click the white button.", url)])
    delta = renderer.render_delta(messages, after_completion=None)
    data, ref = delta.images[0].stored()
    blobs.put(data)
    runner = ModelRunner(str(model_dir))
    params = SamplingParams(temperature=1.0, max_new_tokens=6, ignore_eos=True, sampling_seed=5)
    gen = runner.generate(list(delta.ids), runner.pixel_inputs([url]), params)
    event = TurnEvent(
        run_id="r",
        group_id="g",
        episode_id="e",
        seq=0,
        call_id="c0",
        kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds(delta.ids),
        completion_ids=TokenIds(gen.output_ids),
        completion_logprobs=Logprobs(gen.logprobs),
        images=(ref,),
        policy_version=0,
        finish_reason="length",
        started_at=0.0,
    )
    return event, runner


def trained_logprobs(backend: TorchBackend, sample: object) -> torch.Tensor:
    with torch.no_grad():
        logp = backend.token_logprobs(sample)  # type: ignore[arg-type]
    mask = torch.tensor(list(sample.loss_mask), dtype=torch.bool)  # type: ignore[attr-defined]
    return logp[mask]


def test_trainer_and_engine_agree_and_a_step_moves_the_policy_the_advantages_way(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    event, runner = one_turn(tiny_model_dir, blobs)
    (sample,) = assemble([event]).samples
    backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3)
    before = trained_logprobs(backend, sample)
    assert before.tolist() == pytest.approx(list(event.completion_logprobs), abs=1e-4)

    stats = backend.step([TrainItem(sample, advantage=1.0, episode=0)])
    assert stats.loss.logprob_gap < 1e-4 and stats.grad_norm > 0 and stats.loss.tokens == 6
    for _ in range(2):
        backend.step([TrainItem(sample, advantage=1.0, episode=0)])
    raised = trained_logprobs(backend, sample)
    assert raised.sum() > before.sum()

    # the saved weights are what the engine now samples with
    runner.load_weights(str(backend.save(tmp_path / "v1")), "1")
    from cua_stream.engine.forward import teacher_forced_logprobs

    pixels = runner.pixel_inputs(
        ["data:image/png;base64," + base64.b64encode(blobs.get(event.images[0].sha256)).decode()]
    )
    engine_side = teacher_forced_logprobs(
        runner.model,
        list(event.prompt_ids),
        list(event.completion_ids),
        temperature=1.0,
        pixel_values=pixels.pixel_values,
        image_grid_thw=pixels.image_grid_thw,
    )
    assert engine_side == pytest.approx(raised.tolist(), abs=1e-4)

    for _ in range(6):  # and a negative advantage pushes the other way
        backend.step([TrainItem(sample, advantage=-1.0, episode=0)])
    assert trained_logprobs(backend, sample).sum() < raised.sum()


def test_a_step_without_signal_leaves_the_weights_where_they_are(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Every advantage 0 (a group whose rewards were all equal): no optimizer step — Adam's momentum from
    the step before would otherwise keep moving the weights."""
    blobs = LocalBlobStore(tmp_path / "blobs")
    event, _ = one_turn(tiny_model_dir, blobs)
    (sample,) = assemble([event]).samples
    backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3)
    backend.step([TrainItem(sample, advantage=1.0, episode=0)])  # momentum
    before = {k: v.clone() for k, v in backend.model.state_dict().items()}
    stats = backend.step(
        [TrainItem(sample, advantage=0.0, episode=0), TrainItem(sample, advantage=0.0, episode=1)]
    )
    assert stats.grad_norm == 0.0 and stats.loss.tokens == 12 and stats.loss.logprob_gap > 0
    after = backend.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    backend.step([TrainItem(sample, advantage=1.0, episode=0)])  # and signal moves them again
    assert not all(torch.equal(before[k], backend.model.state_dict()[k]) for k in before)


def test_with_tis_a_steps_later_passes_are_bounded_by_the_clip(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``passes`` 3 with ``tis_clip``: the old logprobs are the step's start, held for every pass, so the
    policy's drift over the passes shows in the ratio and the clip bounds it (they were recomputed on
    every pass before: the ratio was 1 and the clip fraction 0 however far the passes moved the policy)."""
    blobs = LocalBlobStore(tmp_path / "blobs")
    event, _ = one_turn(tiny_model_dir, blobs)
    (sample,) = assemble([event]).samples
    backend = TorchBackend(tiny_model_dir, blobs, lr=5e-2, passes=3, loss=LossConfig(tis_clip=2.0))
    before = trained_logprobs(backend, sample)
    stats = backend.step([TrainItem(sample, advantage=1.0, episode=0)])
    moved = (trained_logprobs(backend, sample) - before).abs().max()
    assert moved > 0.5  # the passes moved the policy far from where the step started ...
    assert stats.loss.clip_fraction > 0  # ... and the last pass saw it: its ratios were clipped


def test_tokens_masked_for_staleness_do_not_enter_the_loss(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``on_stale = "mask"``: the engine's turn with its first 3 tokens sampled by v0 and the rest by v2,
    trained at v2 with ``max_staleness`` 1. The loss counts only the 3 fresh tokens: whatever the masked
    ones' rollout logprobs say, the step's loss and logprob gap do not move (they do unmasked)."""
    from consumers.trainer.grpo.stale_mask import mask_stale
    from cua_stream.events import VersionSpan

    blobs = LocalBlobStore(tmp_path / "blobs")
    event, _ = one_turn(tiny_model_dir, blobs)
    spans = (VersionSpan(version=0, start=0, end=3), VersionSpan(version=2, start=3, end=6))
    (sample,) = assemble([msgspec.structs.replace(event, weight_versions=spans)]).samples
    masked, n = mask_stale(sample, version=2, bound=1)
    assert masked is not None and n == 3
    backend = TorchBackend(tiny_model_dir, blobs, lr=1e-3)

    def measured(s: object) -> tuple[int, float, float]:
        stats, _ = backend.measure([TrainItem(s, advantage=1.0, episode=0)])  # type: ignore[arg-type]
        return stats.loss.tokens, stats.loss.loss, stats.loss.logprob_gap

    def off(s: object) -> object:  # the first 3 completion tokens' rollout logprobs far from the truth
        lps = list(s.rollout_logprobs)  # type: ignore[attr-defined]
        first = len(lps) - 6
        lps[first : first + 3] = [-30.0] * 3
        return replace(s, rollout_logprobs=Logprobs(lps))  # type: ignore[type-var]

    tokens, loss, gap = measured(masked)
    assert tokens == 3
    assert measured(replace(masked, rollout_logprobs=off(sample).rollout_logprobs)) == pytest.approx(  # type: ignore[attr-defined]
        (3, loss, gap)
    )
    assert measured(off(sample))[2] > measured(sample)[2] + 5  # unmasked, they weigh in
