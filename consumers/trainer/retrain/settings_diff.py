"""Two runs' recorded settings compared (``TrainerSettings.settings``): what differs, leaving out what
names a run or what a retrain sets itself. Pure, and light (no torch: ``runs compare`` reads with it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SET_BY_RETRAIN: dict[str, object] = {
    "tasks": [],
    "max_steps": 0,
    "engine_url": "",
    "gateway_url": "",
    "metrics_port": None,
}
"""What a retrain sets itself, whatever its source run had: it issues no work, stops after the recorded
steps, loads no engine and serves no metrics unless told (its source may still run beside it)."""
UNCOMPARED = frozenset(
    {
        "run_id",
        "checkpoint_dir",
        "replay_batches_from",
        "retrain_of",
        "replay_from_step",
        "replay_to_step",
        "rejudge",
    }
    | set(SET_BY_RETRAIN)
)
"""Settings that name a run, where it lives, or what a retrain sets itself, rather than how it trains: a
retrain's differ from its source run's by construction, so they are not listed as changed."""


def changed_settings(base: Mapping[str, Any], mine: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``mine`` whose values differ from ``base``'s (a field ``base`` lacks counts as
    changed), with ``mine``'s values; the ``UNCOMPARED`` ones are left out."""
    missing = object()
    return {k: v for k, v in sorted(mine.items()) if k not in UNCOMPARED and base.get(k, missing) != v}
