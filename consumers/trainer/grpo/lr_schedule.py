"""The learning rate of each GRPO update: a linear warmup, then constant (no I/O, no torch)."""

from __future__ import annotations


def warmup_lr(lr: float, step: int, warmup_steps: int) -> float:
    """The learning rate of update ``step`` (0 = the run's first): ``lr * (step + 1) / warmup_steps``
    until ``warmup_steps`` updates have ramped it to ``lr``, then ``lr`` (``warmup_steps`` 0: ``lr`` from
    the start).

    Why a warmup: AdamW's first update moves every weight with a gradient by the full ``lr`` whatever the
    gradient's size (its second-moment estimate is that one gradient squared, so the step is ``lr`` times
    the gradient's sign), and its moment estimates stay a handful of batches' noise for the next few. A
    policy just out of SFT is one such step from a different one: in ``cua-stream learn`` a single update
    at 3e-4 took a seed from 0.38 to 0.88 reward (docs/learning.md)."""
    if step < 0:
        raise ValueError(f"step: 0 or more, not {step}")
    if warmup_steps <= 0 or step + 1 >= warmup_steps:
        return lr
    return lr * (step + 1) / warmup_steps
