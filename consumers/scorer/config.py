"""The scorer's settings: the ``[scorer]`` section (env ``CUA_SCORER_<FIELD>``), and ``[bus]`` inside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from cua_stream.config import BusConfig, ConfigError, stage_config
from cua_stream.scoring import DEFAULT_CHOICE, Combine, RewardChoice


class ScorerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[scorer]`` section (env ``CUA_SCORER_<FIELD>``)."""

    group_id: str = ""
    """Consumer group on the outcome topic; empty: ``<topic prefix>.scorer``."""
    transactional_id: str = ""
    """This instance's transactional id (and static group member id); empty: ``<topic prefix>.scorer-0``.
    Unique per live instance: a second instance with the same id fences the first."""
    reward_key: str = DEFAULT_CHOICE.key
    """The verifier reward key to score with when the verifier returns it."""
    combine: Combine = DEFAULT_CHOICE.combine
    """Several reward keys, none of them ``reward_key``: mean | min | max | sum, or reject (score 0,
    reason ``ambiguous_reward``)."""
    max_batch: int = 200
    """Outcomes per poll, and so per Kafka transaction."""
    metrics_host: str = "127.0.0.1"
    """The address the metrics page binds (with ``metrics_port``)."""
    metrics_port: int | None = None
    """Serve Prometheus text at http://<metrics_host>:<metrics_port>/metrics (0: any free port)."""
    bus: BusConfig = BusConfig()
    """Filled from the ``[bus]`` section by ``scorer_config``."""

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ConfigError("scorer.max_batch: must be >= 1")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError("scorer.metrics_port: must be 0..65535")

    @property
    def group(self) -> str:
        return self.group_id or f"{self.bus.topic_prefix}.scorer"

    @property
    def instance(self) -> str:
        return self.transactional_id or f"{self.bus.topic_prefix}.scorer-0"

    @property
    def choice(self) -> RewardChoice:
        return RewardChoice(key=self.reward_key, combine=self.combine)


def scorer_config(
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    bus_overrides: Mapping[str, Any] | None = None,
) -> ScorerConfig:
    """The ``[scorer]`` section (file < env < overrides) with the ``[bus]`` section inside it."""
    return stage_config(ScorerConfig, file_data, overrides, bus_overrides)
