"""Configuration of a chaos run (section ``chaos``; env ``CUA_CHAOS_<FIELD>``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import msgspec

from consumers.trainer.config import TRAINER_DEFAULTS
from cua_stream.config import ConfigError, state_dir

Mode = Literal["fast", "real"]


class ChaosConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The loop a chaos run drives, and the faults it injects."""

    mode: Mode = "fast"
    """``fast``: the producers' scripted environment (no desktop) and small screenshots, so hundreds of
    groups fit in minutes; ``real``: Harbor computer-1 trials on the local desktop with the bundled tasks
    (root). Both use the real engine (the tiny Qwen3-VL), gateway, scorer, trainer and broker."""
    seed: int = 0
    """Seeds the fault schedule (and names the run)."""
    faults: int = 30
    """Faults the schedule injects (0: a run without faults)."""
    every_s: float = 3.0
    """Mean time between faults (a Poisson process)."""
    max_pause_s: float = 12.0
    """Longest SIGSTOP (long enough for consumer sessions to time out and groups to rebalance)."""
    steps: int = 12
    """GRPO steps the trainer takes at least: the run stops it once it has taken them and every fault of
    the schedule has been applied and healed (a quick trainer trains on meanwhile)."""
    groups_per_step: int = TRAINER_DEFAULTS["groups_per_step"]
    """The trainer's ``groups_per_step`` in the run."""
    group_size: int = TRAINER_DEFAULTS["group_size"]
    """The trainer's ``group_size`` in the run (episodes per GRPO group)."""
    max_staleness: int = 2
    """The trainer's ``max_staleness`` in the run."""
    producers: int = 2
    """Producer processes the run starts (each one a target of the fault schedule)."""
    concurrency: int = 4
    """Episodes per producer at once."""
    turns: int = 2
    """Turns per episode (the producers' ``max_turns``)."""
    max_new_tokens: int = 8
    """Completion tokens per call (small: the tiny model's replies are not read)."""
    desktop_size: int = 256
    """``fast``: the scripted screenshots' width and height (pixels)."""
    base_port: int = 29500
    """The broker, engine, gateway and metrics ports are taken from here upwards (base .. base + 21 with
    two producers). They must lie below the kernel's ephemeral range (``ip_local_port_range``; 32768 and
    up by default), else the run refuses to start: the daemons are killed and rebind their ports all run
    long, and a port in that range may meanwhile be handed to an outgoing connection."""
    home: str = ""
    """Where the run's broker data, logs, checkpoints and blobs go; empty: ``<state dir>/chaos/<run>``."""
    duration_s: float = 0.0
    """0: the run ends when the trainer has taken ``steps`` steps. More: a soak: the trainer trains without
    a step limit and the run ends this many seconds after the start (faults, if any, meanwhile)."""
    sample_every_s: float = 5.0
    """How often each daemon's memory and event-loop lag and the consumer groups' lag are sampled."""
    quiesce_timeout_s: float = 300.0
    """After the last step: how long every request may take to get its outcome and score."""
    secure: bool = False
    """The broker on SASL_SSL (SCRAM-SHA-512) with the topic registry's ACLs, and every daemon under its
    own role's principal (gateway, producer, scorer, trainer): the run then also shows that least
    privilege is enough for the loop to survive its faults."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.turns < 1:
            raise ConfigError("chaos.steps and chaos.turns: must be >= 1")
        for name in ("groups_per_step", "group_size", "producers", "concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"chaos.{name}: must be >= 1")
        if self.faults < 0 or self.every_s <= 0 or self.max_pause_s <= 0:
            raise ConfigError("chaos.faults must be >= 0, chaos.every_s and chaos.max_pause_s > 0")
        if not 1024 <= self.base_port <= 65000:
            raise ConfigError("chaos.base_port: must be 1024..65000")
        if self.duration_s < 0 or self.sample_every_s <= 0:
            raise ConfigError("chaos.duration_s must be >= 0 and chaos.sample_every_s > 0")
        if not 64 <= self.desktop_size <= 2048:
            raise ConfigError("chaos.desktop_size: must be 64..2048")

    @property
    def run_id(self) -> str:
        return f"chaos-{self.mode}-s{self.seed}-{time.strftime('%m%d-%H%M%S')}"

    def home_for(self, run_id: str) -> Path:
        return Path(self.home) if self.home else state_dir() / "chaos" / run_id
