"""``cua-stream retrain``'s decisions (``consumers/trainer/retrain/plan.py``): the steps asked for, the
``--set`` overrides checked (an unknown key gets the closest names, a setting that decides which samples
a step holds or that a retrain sets itself is refused, naming it), the new run's settings, and each
retrained step shown beside its record."""

from __future__ import annotations

import msgspec
import pytest

from consumers.trainer.retrain.plan import (
    KNOWN,
    change_lines,
    parse_override,
    retrain_settings,
    start_of,
    step_line,
)
from consumers.trainer.retrain.rerun import parse_steps
from cua_stream.events import TrainStep


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", (1, 0)), ("3", (3, 3)), ("2..5", (2, 5)), ("2..", (2, 0)), ("..4", (1, 4)), (" 2 .. 5 ", (2, 5))],
)
def test_the_steps_asked_for(text: str, expected: tuple[int, int]) -> None:
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text", ["..", "a..b", "0..3", "5..2", "1 2", "-1"])
def test_a_bad_step_range_names_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--steps"):
        parse_steps(text)


def test_an_override_is_read_as_json_where_it_is_json() -> None:
    assert parse_override("trainer.kl_coef=0.3") == ("kl_coef", 0.3)
    assert parse_override("trainer.tis_clip=null") == ("tis_clip", None)
    assert parse_override("trainer.loss_reduction=token") == ("loss_reduction", "token")
    assert parse_override('trainer.metrics_sinks=["tensorboard:runs"]') == (
        "metrics_sinks",
        ["tensorboard:runs"],
    )
    assert parse_override("trainer.std_normalize=false") == ("std_normalize", False)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("trainer.kl_cof=1", "--set trainer.kl_cof: no such trainer setting; closest: trainer.kl_coef"),
        ("trainer.lr_warmup=3", "closest: trainer.lr_warmup_steps"),
        ("trainer.zzzzzz=1", "--set trainer.zzzzzz: no such trainer setting"),
        ("trainer.engine_api_key=x", "no such trainer setting"),  # a secret is not a recorded setting
        ("kl_coef=1", "expected trainer.KEY=VALUE"),
        ("trainer.kl_coef", "expected trainer.KEY=VALUE"),
        ("producer.concurrency=2", "expected trainer.KEY=VALUE"),
        ("trainer.max_staleness=3", "trainer.max_staleness: it decides which samples a step holds"),
        ("trainer.group_size=2", "trainer.group_size: not a retrain's to change (a recorded group holds"),
        ("trainer.on_discard=keep_survivors", "trainer.on_discard: it decides which samples"),
        ("trainer.run_id=x", "trainer.run_id: not a retrain's to change (give it as --run-id)"),
        ("trainer.top_p=0.9", "trainer.top_p: not a retrain's to change (a retrain samples no episode)"),
        ("trainer.engine_url=http://x", "a retrain loads no engine"),
    ],
)
def test_a_bad_override_is_one_line_naming_the_key(item: str, expected: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_override(item)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_setting_that_decides_the_samples_may_change_when_the_groups_are_rejudged() -> None:
    assert parse_override("trainer.max_staleness=0", rejudge=True) == ("max_staleness", 0)
    assert parse_override("trainer.filter_zero_variance=true", rejudge=True) == ("filter_zero_variance", True)
    with pytest.raises(ValueError, match="trainer.group_size: not a retrain's to change"):
        parse_override("trainer.group_size=2", rejudge=True)  # a recorded group has its size


def test_every_setting_that_trains_may_be_changed() -> None:
    for name in ("lr", "lr_warmup_steps", "passes", "clip_low", "clip_high", "tis_clip", "kl_coef",
                 "loss_reduction", "max_grad_norm", "negative_scale", "std_normalize", "temperature",
                 "backend", "device", "keep_versions", "metrics_sinks", "model_path", "blob_dir"):  # fmt: skip
        assert name in KNOWN and parse_override(f"trainer.{name}=1")[0] == name


def test_the_new_runs_settings_are_its_sources_with_the_overrides_and_its_own_identity() -> None:
    source = {"run_id": "r1", "tasks": ["click-button"], "lr": 0.1, "kl_coef": 0.0, "max_steps": 9,
              "engine_url": "http://e", "checkpoint_dir": "/ckpt/r1", "metrics_port": 9100}  # fmt: skip
    mine = retrain_settings(
        source, {"kl_coef": 0.3}, source_run="r1", run_id="r2", batches_from="cua", steps=(2, 0),
        checkpoint_dir="/ckpt/r2",
    )  # fmt: skip
    assert mine == {
        "run_id": "r2", "tasks": [], "lr": 0.1, "kl_coef": 0.3, "max_steps": 0, "engine_url": "",
        "gateway_url": "", "checkpoint_dir": "/ckpt/r2", "metrics_port": None, "retrain_of": "r1",
        "replay_batches_from": "cua", "replay_from_step": 2, "replay_to_step": 0, "rejudge": False,
    }  # fmt: skip
    assert change_lines(source, {"kl_coef": 0.3, "passes": 2}) == [
        "trainer.kl_coef  0.0 → 0.3",
        "trainer.passes   null → 2",
    ]


def test_the_start_is_the_version_before_the_first_step_unless_named() -> None:
    assert start_of("", 1) == 0 and start_of("", 4) == 3
    assert start_of("v2", 4) == 2 and start_of("ckpt/r1", 4) == "ckpt/r1"


def test_a_retrained_step_is_shown_beside_its_record() -> None:
    def step(run: str, loss: float, **metrics: float) -> TrainStep:
        return TrainStep(
            run_id=run, step=2, policy_version=2, n_groups=1, n_episodes=2, n_samples=2, loss=loss,
            metrics=metrics, finished_at=0.0,
        )  # fmt: skip

    mine = step("r2", 0.5, grad_norm=1.25, kl=0.0)
    assert step_line(mine, step("r1", 0.5, grad_norm=1.5)) == (
        "step 2: loss 0.5 (= r1)  kl 0 (-)  grad_norm 1.25 (r1 1.5)"
    )
    assert step_line(mine, None) == "step 2: loss 0.5 (-)  kl 0 (-)  grad_norm 1.25 (-)"
    recorded = msgspec.structs.replace(step("r1", 0.5), group_ids=("g1", "g2", "g3"))
    rejudged = msgspec.structs.replace(mine, group_ids=("g2",))
    assert step_line(rejudged, recorded).endswith("  left out: g1, g3")
