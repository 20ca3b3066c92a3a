"""Re-training a run from a replayed range (``trainer.replay_batches_from``): the batches its steps took,
read from the original prefix's ``TrainStep`` records, so a trainer on the replayed prefix takes the same
groups in the same order (``grpo.recorded_batch``) and its steps can be compared with the recorded ones."""

from __future__ import annotations

import msgspec

from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.errors import ConfigError
from cua_stream.events import TrainStep
from cua_stream.topics import TRAIN_STEPS


async def recorded_batches(bus: BusConfig, prefix: str, run_id: str) -> dict[int, tuple[str, ...]]:
    """Step number → the group ids it trained, in order, of run ``run_id``'s steps under ``prefix`` (the
    first record of each number, as ``inspect`` reads them). One clear error if there are none."""
    source = msgspec.structs.replace(bus, topic_prefix=prefix)
    batches: dict[int, tuple[str, ...]] = {}
    async for delivery in scan(source, TRAIN_STEPS):
        event = delivery.event
        if isinstance(event, TrainStep) and event.run_id == run_id:
            batches.setdefault(event.step, event.group_ids)
    if not batches:
        raise ConfigError(
            f"trainer.replay_batches_from: {source.topics().name_of(TRAIN_STEPS)} holds no step of run "
            f"{run_id!r} to take the batches from"
        )
    return batches
