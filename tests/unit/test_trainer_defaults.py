"""The ``[trainer]`` section's defaults are written once: the loss's on ``LossConfig``, the group rules' on
``GroupPolicy``, the rest on ``TrainerConfig``; the views other commands read (``inspect``'s ``StepRules``,
``--recompute``'s ``RecomputeRules``) take theirs from there, and none of it needs torch."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import msgspec
import pytest

from consumers.trainer.config import TRAINER_DEFAULTS, TrainerConfig
from consumers.trainer.grpo.groups import GroupPolicy
from consumers.trainer.grpo.loss_config import LossConfig
from consumers.trainer.inspect.step import StepRules
from cua_stream.app.recompute import RecomputeRules

LOSS_FIELD = {"clip_low": "clip_low", "clip_high": "clip_high", "tis_clip": "tis_clip",
              "kl_coef": "kl_coef", "loss_reduction": "reduction"}  # fmt: skip
GROUP_FIELDS = (
    "on_discard",
    "min_survivors",
    "filter_zero_variance",
    "std_normalize",
    "negative_scale",
    "on_stale",
)


def defaults(struct: type[msgspec.Struct]) -> dict[str, object]:
    return {f.name: f.default for f in msgspec.structs.fields(struct) if f.default is not msgspec.NODEFAULT}


def test_the_sections_loss_and_group_defaults_are_the_rules_own() -> None:
    rules = {f.name: f.default for f in dataclasses.fields(LossConfig)}
    assert {field: TRAINER_DEFAULTS[field] for field in LOSS_FIELD} == {
        field: rules[name] for field, name in LOSS_FIELD.items()
    }
    group = {f.name: f.default for f in dataclasses.fields(GroupPolicy)}
    assert {field: TRAINER_DEFAULTS[field] for field in GROUP_FIELDS} == {
        field: group[field] for field in GROUP_FIELDS
    }


@pytest.mark.parametrize("view", [StepRules, RecomputeRules])
def test_each_view_of_the_section_has_the_sections_defaults(view: type[msgspec.Struct]) -> None:
    shared = {name: value for name, value in defaults(view).items() if name in TRAINER_DEFAULTS}
    assert len(shared) >= 8  # the walk holds the fields it is about
    assert shared == {name: TRAINER_DEFAULTS[name] for name in shared}


def test_trainer_defaults_are_read_from_the_class() -> None:
    assert defaults(TrainerConfig) == TRAINER_DEFAULTS
    assert "run_id" not in TRAINER_DEFAULTS  # required: no default to show


def test_the_trainer_config_and_its_views_import_without_torch() -> None:
    code = (
        "import sys, consumers.trainer.config, consumers.trainer.inspect.step, cua_stream.app.recompute;"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
