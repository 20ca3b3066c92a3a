"""The fault schedule of a chaos run: pure, a function of its seed.

Faults arrive as a Poisson process (mean gap ``every_s``) on the targets in proportion to their weights,
the way independent machines fail in a cluster: two targets can be down at once, and a target can be hit
again soon after it came back. What each fault does:

- ``kill``: SIGKILL, then the same command again after ``hold_s`` (a crashed pod restarted);
- ``pause``: SIGSTOP for ``hold_s`` then SIGCONT (a GC pause or a frozen VM: consumer sessions time out,
  groups rebalance, HTTP calls wait);
- ``broker_restart``: the Kafka broker stopped, ``hold_s`` down, started on the same data;
- ``poison``: an undecodable record written to the outcome topic (it must reach the dead-letter topic).
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass


class Action(enum.StrEnum):
    KILL = "kill"
    PAUSE = "pause"
    BROKER_RESTART = "broker_restart"
    POISON = "poison"


BROKER = "broker"
POISON_TARGET = "outcome-topic"

DEFAULT_WEIGHTS: Mapping[str, float] = {
    "producer": 4.0,  # several producers share this weight (see ``plan``)
    "scorer": 2.0,
    "trainer": 2.0,
    "gateway": 2.0,
    "engine": 1.5,
    BROKER: 0.4,
    POISON_TARGET: 0.8,
}
"""Relative rates. The producers fail most (there are most of them, and they run the desktops); the broker
least (each restart stalls everything for several seconds)."""

KILL_SHARE = 0.65
"""Of the faults on a daemon, the share that are kills (the rest are pauses)."""


@dataclass(frozen=True)
class Fault:
    at_s: float
    """Seconds after the run's start (the runner may apply it later, once its target is back up)."""
    action: Action
    target: str
    hold_s: float
    """Down time before the restart (kill, broker), or the length of a pause."""
    hard: bool = False
    """A broker restart by SIGKILL (log recovery on start) rather than a clean stop."""

    def describe(self, at_s: float | None = None) -> str:
        """One line for the run's log; ``at_s``: when it was applied (default: when planned)."""
        what = {
            Action.KILL: f"SIGKILL, restart after {self.hold_s:.1f}s",
            Action.PAUSE: f"SIGSTOP for {self.hold_s:.1f}s",
            Action.BROKER_RESTART: f"{'SIGKILL' if self.hard else 'stop'}, start after {self.hold_s:.1f}s",
            Action.POISON: "an undecodable record",
        }[self.action]
        return f"t+{self.at_s if at_s is None else at_s:6.1f}s {self.target:<11} {what}"


def plan(
    seed: int,
    count: int,
    *,
    every_s: float,
    producers: int,
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    max_pause_s: float = 12.0,
) -> list[Fault]:
    """``count`` faults, ``every_s`` apart on average, on the daemons named in ``weights`` (``producer``
    stands for ``producer-0`` .. ``producer-{producers-1}``)."""
    if count < 0 or every_s <= 0 or producers < 0:
        raise ValueError("plan: count >= 0, every_s > 0 and producers >= 0 are required")
    rng = random.Random(seed)
    names = [n for n in weights if n != "producer" or producers]
    rates = [weights[n] for n in names]
    faults: list[Fault] = []
    at = 0.0
    for _ in range(count):
        at += rng.expovariate(1.0 / every_s)
        name = rng.choices(names, rates)[0]
        if name == "producer":
            name = f"producer-{rng.randrange(producers)}"
        faults.append(_fault(rng, round(at, 2), name, max_pause_s))
    return faults


def _fault(rng: random.Random, at: float, target: str, max_pause_s: float) -> Fault:
    if target == BROKER:
        return Fault(
            at, Action.BROKER_RESTART, target, round(rng.uniform(0.5, 4.0), 2), hard=rng.random() < 0.5
        )
    if target == POISON_TARGET:
        return Fault(at, Action.POISON, target, 0.0)
    if rng.random() < KILL_SHARE:
        return Fault(at, Action.KILL, target, round(rng.uniform(0.0, 2.0), 2))
    return Fault(at, Action.PAUSE, target, round(rng.uniform(0.5, max_pause_s), 2))


def kind(target: str) -> str:
    """A target's kind: ``producer-3`` is a ``producer``."""
    return re.sub(r"-\d+$", "", target)


def tally(faults: list[Fault]) -> dict[tuple[str, str], int]:
    """Faults by (target kind, action)."""
    out: dict[tuple[str, str], int] = {}
    for f in faults:
        key = (kind(f.target), f.action.value)
        out[key] = out.get(key, 0) + 1
    return out
