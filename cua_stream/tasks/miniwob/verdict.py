"""A MiniWoB++ episode's verdict: what its page reported → reward. Pure.

The page's own ``core.endEpisode`` decides (the wrapper posts its raw reward once: ``site``); MiniWoB++'s
time-scaled reward is not used (its wall-clock timer is taken out of the episode, and a slow turn must not
change the score). Success is the raw reward reaching a threshold: 1.0 by default, which is MiniWoB++'s
binary reward (``get_binary_reward``: raw == 1.0) as the literature reports it; tasks whose reward is
continuous (circle-center's distance to the centre, bisect-angle's angle) take a lower one per task
(``get_thresholded_reward``), set at export. Leaving the page before it scored is a failure, and so is a
page that never ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_THRESHOLD = 1.0


@dataclass(frozen=True)
class Verdict:
    reward: float
    """1.0 or 0.0."""
    raw: float | None
    """The page's raw reward, when it reported one."""
    why: str

    def rewards(self) -> dict[str, float]:
        """What the verifier writes to ``reward.json``: the reward, and the raw reward beside it."""
        return {"reward": self.reward} if self.raw is None else {"reward": self.reward, "raw": self.raw}


def verdict(events: Sequence[Mapping[str, Any]], threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """The first decisive event decides: the page's reward report (success when its raw reward is at least
    ``threshold``), or the page being left before it (0)."""
    for event in events:
        if "wob" in event:
            wob = event["wob"]
            raw = float(wob["raw"])
            met = raw >= threshold
            said = f" ({wob['reason']})" if wob.get("reason") else ""
            return Verdict(float(met), raw, f"raw reward {raw:g} {'>=' if met else '<'} {threshold:g}{said}")
        if "left" in event:
            return Verdict(0.0, None, f"left before the page scored: {event['left']}")
    return Verdict(0.0, None, "the page never ended the episode")
