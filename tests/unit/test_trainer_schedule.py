"""The GRPO learning-rate warmup against hand-computed values."""

from __future__ import annotations

import pytest

from consumers.trainer.grpo.lr_schedule import warmup_lr


def test_the_lr_ramps_linearly_then_holds() -> None:
    assert [warmup_lr(1e-3, step, 4) for step in range(6)] == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]
    )


@pytest.mark.parametrize("warmup_steps", [0, 1])
def test_no_warmup_is_the_full_lr_from_the_first_step(warmup_steps: int) -> None:
    assert [warmup_lr(3e-4, step, warmup_steps) for step in range(3)] == [3e-4, 3e-4, 3e-4]


def test_a_negative_step_is_refused() -> None:
    with pytest.raises(ValueError, match="step: 0 or more, not -1"):
        warmup_lr(1e-3, -1, 4)
