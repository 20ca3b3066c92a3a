"""The loss's settings, apart from the loss (``consumers/trainer/grpo/loss.py``, which needs torch): the one
place their defaults are written. The trainer's config and ``inspect step --recompute``'s rules take
theirs from here, and neither needs torch to start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    tis_clip: float | None = None
    reduction: Literal["episode", "token"] = "episode"
    kl_coef: float = 0.0

    def __post_init__(self) -> None:
        if self.reduction not in ("episode", "token"):
            raise ValueError(f"reduction: 'episode' or 'token', not {self.reduction!r}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef: 0 (off) or more, not {self.kl_coef}")
