"""The trainer's settings as a record (``TrainerSettings``): its resolved ``[trainer]`` section, secrets
left out, published each time a run starts or resumes, so the log says what trained each step and
``cua-stream retrain`` can train a run's batches again without a hand-written config. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args, get_type_hints

import msgspec

from consumers.trainer.config import TrainerConfig
from consumers.trainer.retrain.settings_diff import changed_settings
from cua_stream.config import Secret
from cua_stream.events import TrainerSettings

SECRET_FIELDS = frozenset(
    name for name, hint in get_type_hints(TrainerConfig).items() if Secret in (hint, *get_args(hint))
)
"""Fields typed ``Secret`` (the engine's and the gateway's admin keys): never on a topic."""
LEFT_OUT = SECRET_FIELDS | {"bus"}
"""Not in the record: the secrets, and the bus (its own section, where to connect, not how to train)."""


def public_settings(config: TrainerConfig) -> dict[str, Any]:
    """``config``'s fields as plain values (what a ``[trainer]`` section holds), secrets and bus left out,
    the directories resolved (an empty one means a default under this host's state directory)."""
    kept = {name: getattr(config, name) for name in config.__struct_fields__ if name not in LEFT_OUT}
    kept |= {"checkpoint_dir": str(config.checkpoints), "blob_dir": config.blobs}
    return msgspec.to_builtins(kept)  # the secrets never reach the encoder (it refuses them anyway)


def settings_record(
    config: TrainerConfig, *, step: int, now: float, source: Mapping[str, Any] | None = None
) -> TrainerSettings:
    """The record a trainer publishes as it starts or resumes at ``step``; a retrain's (``retrain_of``)
    lists what differs from ``source``, its source run's settings."""
    mine = public_settings(config)
    return TrainerSettings(
        run_id=config.run_id,
        settings=mine,
        step=step,
        retrain_of=config.retrain_of,
        changed=changed_settings(source, mine) if config.retrain_of and source is not None else {},
        started_at=now,
    )
