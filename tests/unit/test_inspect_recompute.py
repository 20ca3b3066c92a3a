"""`inspect step --recompute`'s pure parts and the checkpoint's retention: the recomputed metrics beside a
step's record (equal within tolerance, a difference named, the last pass's clip fraction not compared),
the tokens of widest trainer/engine gap in order, the items packed in the trainer's order; and a
checkpoint keeps the weights of its last ``keep_versions`` versions, a pruned one being one clear error
naming the option."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.grpo.groups import recorded_batch
from consumers.trainer.inspect.recompute import batch_items, compare, recomputation, widest_gaps
from consumers.trainer.inspect.render import recompute_document, recompute_text
from consumers.trainer.inspect.step import StepRules, rebuild_step
from cua_stream.app.recompute import start_weights
from cua_stream.config import BusConfig, ConfigError, build
from cua_stream.errors import ReplayDiverged
from tests.unit.test_inspect import E0, E1, STEP, deliveries

RECORD = msgspec.structs.replace(
    STEP,
    loss=0.25,
    metrics={**STEP.metrics, "grad_norm": 3.5, "logprob_gap": 0.125, "kl": 0.0, "clip_fraction": 0.0},
)
SAME = {"loss": 0.25 * (1 + 1e-7), "grad_norm": 3.5, "logprob_gap": 0.125, "kl": 0.0, "trained_tokens": 10.0}


def test_recomputed_metrics_equal_to_the_record_agree_and_a_different_one_is_named() -> None:
    checks = compare(RECORD, SAME, passes=1)
    assert [c.name for c in checks] == ["loss", "logprob_gap", "grad_norm", "kl", "trained_tokens"]
    assert all(c.agrees for c in checks)
    off = compare(RECORD, {**SAME, "grad_norm": 3.51}, passes=1)
    assert [c.name for c in off if c.agrees is False] == ["grad_norm"]
    # the record's clip fraction is the last pass's: shown, not compared
    (clip,) = [c for c in compare(RECORD, {"clip_fraction": 0.5}, passes=3) if c.name == "clip_fraction"]
    assert clip.agrees is None and "pass 3" in clip.note


def test_the_widest_gaps_come_first_from_trained_tokens_only() -> None:
    batch = rebuild_step(STEP, deliveries(), StepRules())
    items = batch_items(batch)
    assert [(s.episode_id, e) for s, _, e in items] == [(E0, 0), (E0, 0), (E1, 1)]  # the trainer's order
    samples = [s for s, _, _ in items]
    # the trainer says -0.5 (the engine's) everywhere but two tokens
    mine = [[-0.5 if m else 0.0 for m in s.loss_mask] for s in samples]
    first_trained = next(i for i, m in enumerate(samples[1].loss_mask) if m)
    mine[1][first_trained] = -3.0
    mine[2][len(mine[2]) - 1] = 0.5
    gaps = widest_gaps(samples, mine, 3)
    assert [(g.leaf_call_id, round(g.delta, 6)) for g in gaps[:2]] == [
        (samples[1].leaf_call_id, -2.5),
        (samples[2].leaf_call_id, 1.0),
    ]
    assert gaps[2].delta == 0.0 and all(samples[0].loss_mask[0] == 0 or g.position > 0 for g in gaps)
    again = recomputation(batch, SAME, mine, passes=1, top_k=2)
    assert again.start_version == 0 and len(again.gaps) == 2
    lines = list(recompute_text(again, lambda ids: f"<{ids[0]}>"))
    assert any("Δ -2.5000" in line and f"<{gaps[0].token_id}>" in line for line in lines)
    assert recompute_document(again, None)["token_gaps"][0]["delta"] == pytest.approx(-2.5)


def test_a_checkpoint_keeps_its_last_versions_weights(tmp_path: Path) -> None:
    for v in range(1, 6):
        (tmp_path / f"weights-v{v}").mkdir()
        (tmp_path / f"weights-v{v}" / "config.json").write_text("{}")
    saved = ckpt.Checkpoint(run_id="r", step=4, version=4, weights="weights-v4")
    ckpt.save(tmp_path, saved, {}, keep_versions=3)
    # v5 was written by a step a kill cut short before its commit: it goes, the restart trains it again
    assert sorted(p.name for p in tmp_path.glob("weights-v*")) == ["weights-v2", "weights-v3", "weights-v4"]
    assert start_weights(tmp_path, "r", 2) == tmp_path / "weights-v2"
    assert start_weights(tmp_path, "r", 0) is None  # the run's start model
    with pytest.raises(ConfigError, match="no weights of v1 .*trainer.keep_versions"):
        start_weights(tmp_path, "r", 1)
    with pytest.raises(ConfigError, match="run 'r''s checkpoint, not 'other'"):
        start_weights(tmp_path, "other", 2)
    ckpt.save(tmp_path, saved, {})  # the default: today's, only the current
    assert [p.name for p in tmp_path.glob("weights-v*")] == ["weights-v4"]


def test_keep_versions_is_validated_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="trainer.keep_versions: must be >= 1"):
        TrainerConfig(run_id="r", model_path=str(tmp_path), keep_versions=0)


def test_a_retraining_takes_the_recorded_batches_in_their_order() -> None:
    assert recorded_batch(["g3", "g1", "g2"], ("g2", "g3")) == [2, 0]  # the record's order, not the queue's
    assert recorded_batch(["g3", "g1"], ("g2", "g3")) is None  # g2 not judged yet: wait for it
    assert recorded_batch(["g1"], ()) is None  # past the recorded run's last step
    with pytest.raises(ReplayDiverged, match="trained g2, which this trainer dropped"):
        recorded_batch(["g3"], ("g2", "g3"), decided={"g1", "g2"})  # g2 decided, not queued: dropped


def test_a_rejudging_retrain_leaves_the_groups_it_dropped_out_of_their_step() -> None:
    assert recorded_batch(["g3", "g1"], ("g1", "g2", "g3"), {"g2"}, rejudge=True) == [1, 0]
    assert recorded_batch(["g1"], ("g1", "g2", "g3"), {"g2"}, rejudge=True) is None  # g3 not judged yet
    assert recorded_batch([], ("g2",), {"g2"}, rejudge=True) == []  # every group dropped: an empty step
    assert recorded_batch(["g1"], (), rejudge=True) is None  # past the recorded run's last step


def test_a_retraining_config_is_checked_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    base = {"run_id": "r", "model_path": str(tmp_path), "bus": BusConfig(topic_prefix="replay")}
    with pytest.raises(ConfigError, match="trainer.replay_batches_from: .*trainer.tasks must be empty"):
        TrainerConfig(**base, replay_batches_from="cua", tasks=["click-button"])
    with pytest.raises(ConfigError, match="trainer.replay_batches_from: 'replay' is the prefix this trainer"):
        TrainerConfig(**base, replay_batches_from="replay")
    env = {"CUA_TRAINER_REPLAY_BATCHES_FROM": "cua"}  # as docs/how-to/replay-and-tap.md's example sets it
    assert build(TrainerConfig, "trainer", overrides=base, env=env).replay_batches_from == "cua"
