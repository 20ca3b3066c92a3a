"""The trainer's settings on its log (``TrainerSettings``): its resolved ``[trainer]`` section, no secret
in it, read back into the same config; what a retrain changed; and the recorded run's steps and settings
a re-training takes (``consumers/trainer/retrain/rerun.py``)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from consumers.trainer.config import TrainerConfig
from consumers.trainer.retrain.rerun import (
    RecordedRun,
    settings_changes,
    settings_in_force,
    spans,
    start_error,
    steps_in_range,
)
from consumers.trainer.retrain.settings import public_settings, settings_record
from consumers.trainer.retrain.settings_diff import changed_settings
from consumers.trainer.stream.join import Join
from cua_stream.bus.codec import Delivery, key_of
from cua_stream.config import BusConfig, ConfigError, Secret, convert, state_dir
from cua_stream.events import Reward, ScoreEvent, TrainerSettings, TrainStep, encode
from cua_stream.topics import TRAIN_STEPS


@pytest.fixture
def model(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


def test_the_settings_record_holds_every_setting_but_the_secrets_and_reads_back_into_the_config(
    model: str,
) -> None:
    bus = BusConfig(topic_prefix="p1")
    config = TrainerConfig(
        run_id="r1", model_path=model, kl_coef=0.3, tis_clip=2.0, tasks=["click-button"],
        engine_api_key=Secret("engine-sekrit"), gateway_api_key=Secret("gateway-sekrit"), bus=bus,
    )  # fmt: skip
    record = settings_record(config, step=4, now=1.5)
    assert record.run_id == "r1" and record.step == 4 and record.retrain_of == "" and record.changed == {}
    assert {"engine_api_key", "gateway_api_key", "bus"}.isdisjoint(record.settings)
    assert record.settings["kl_coef"] == 0.3 and record.settings["tasks"] == ["click-button"]
    assert b"sekrit" not in encode(record)
    assert record.settings["checkpoint_dir"] == str(state_dir() / "trainer" / "r1")  # resolved here
    assert record.settings["blob_dir"] == str(state_dir() / "blobs")
    back = msgspec.structs.replace(convert(TrainerConfig, "trainer", record.settings), bus=bus)
    resolved = {"checkpoint_dir": str(config.checkpoints), "blob_dir": config.blobs}
    assert back == msgspec.structs.replace(config, engine_api_key=None, gateway_api_key=None, **resolved)
    assert key_of(TRAIN_STEPS, record) == b"r1" and TRAIN_STEPS.accepts(record)


def test_a_retrain_lists_the_settings_that_differ_from_its_source_runs_not_its_identity(model: str) -> None:
    source = public_settings(TrainerConfig(run_id="r1", model_path=model, checkpoint_dir="/a"))
    mine = TrainerConfig(
        run_id="r1-kl", model_path=model, checkpoint_dir="/b", kl_coef=0.3, passes=2,
        retrain_of="r1", replay_batches_from="cua", replay_from_step=2,
    )  # fmt: skip
    record = settings_record(mine, step=1, now=0.0, source=source)
    assert record.retrain_of == "r1" and record.changed == {"kl_coef": 0.3, "passes": 2}
    assert changed_settings({"lr": 0.1}, {"lr": 0.1, "passes": 2}) == {"passes": 2}  # one lacking counts


def step(n: int, *groups: str) -> TrainStep:
    return TrainStep(
        run_id="r1", step=n, policy_version=n, n_groups=len(groups), n_episodes=2, n_samples=2, loss=0.0,
        group_ids=groups, finished_at=0.0,
    )  # fmt: skip


def settings(at: int, **values: object) -> TrainerSettings:
    return TrainerSettings(run_id="r1", settings={"lr": 0.1, **values}, step=at, started_at=0.0)


def test_the_recorded_steps_of_a_range_are_taken_and_a_step_not_there_is_one_error() -> None:
    recorded = RecordedRun(
        "r1", {1: step(1, "g0"), 2: step(2, "g1", "g2"), 3: step(3, "g3")}, [], "cua.train_steps"
    )
    assert steps_in_range(recorded, 1, 0) == {1: ("g0",), 2: ("g1", "g2"), 3: ("g3",)}
    assert steps_in_range(recorded, 2, 2) == {2: ("g1", "g2")}
    with pytest.raises(ConfigError, match=r"run 'r1' has no step 4 on cua.train_steps \(its steps: 1..3\)"):
        steps_in_range(recorded, 2, 4)
    with pytest.raises(ConfigError, match="holds no step of run 'r2'"):
        steps_in_range(RecordedRun("r2", {}, [], "cua.train_steps"), 1, 0)
    assert spans([1, 2, 3, 5, 7, 8]) == "1..3, 5, 7..8"


def test_the_settings_in_force_at_a_step_are_those_of_the_last_start_before_it() -> None:
    records = [settings(0), settings(3, kl_coef=0.3), settings(5, kl_coef=0.3)]
    assert settings_in_force(records, 1) is records[0]
    assert settings_in_force(records, 3) is records[0]  # step 3 trained before the restart at 3
    assert settings_in_force(records, 4) is records[1]
    assert settings_in_force(records[1:], 2) is None  # nothing recorded then
    assert settings_changes(records, 1, 8) == [(4, ["kl_coef"])]  # the restart at 5 changed nothing
    assert settings_changes(records, 1, 3) == []  # the change came after the range


def test_a_retraining_starts_at_the_step_before_its_first(tmp_path: Path) -> None:
    recorded = {3: ("g2",), 4: ("g3",)}
    assert start_error(recorded, 2, tmp_path) is None and start_error(recorded, 3, tmp_path) is None
    assert start_error(None, 0, tmp_path) is None
    error = start_error(recorded, 0, tmp_path)
    assert error is not None and "replay_from_step: step 3" in error and "at step 0" in error


def test_a_retraining_config_names_its_bad_field(model: str) -> None:
    base = {"run_id": "r1-b", "model_path": model, "bus": BusConfig(topic_prefix="cua")}
    with pytest.raises(
        ConfigError, match="trainer.retrain_of, trainer.rejudge: need trainer.replay_batches_from"
    ):
        TrainerConfig(**base, retrain_of="r1")
    with pytest.raises(ConfigError, match="trainer.retrain_of: 'r1-b' is this trainer's own run"):
        TrainerConfig(**base, retrain_of="r1-b", replay_batches_from="cua")
    with pytest.raises(ConfigError, match="trainer.replay_to_step: 2 is before replay_from_step 3"):
        TrainerConfig(
            **base, retrain_of="r1", replay_batches_from="cua", replay_from_step=3, replay_to_step=2
        )
    # on its source run's own prefix: allowed for a retrain under a new id, not for a replay under the same
    config = TrainerConfig(**base, retrain_of="r1", replay_batches_from="cua")
    assert config.episodes_run == "r1" and TrainerConfig(**base).episodes_run == "r1-b"


def test_a_retrainings_join_takes_only_the_groups_of_its_recorded_steps() -> None:
    join = Join("r1", 1, ["t.turns"], only={"r1-g000001"})

    def score(group: str) -> Delivery:
        event = ScoreEvent(
            run_id="r1", group_id=group, episode_id=f"{group}-e0", verdict=Reward(value=1.0), policy_version=0,
            scored_at=0.0,
        )  # fmt: skip
        return Delivery(event, "t.scores", 0, 0, None, b"", (), 0)

    assert join.add(score("r1-g000000"), 0.0) is None and "r1-g000000" not in join.groups
    assert join.add(score("r1-g000001"), 0.0) is not None
