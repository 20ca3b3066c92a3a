"""The trainer's process entry (``cua-stream trainer``, ``cua-stream retrain``): the daemon run until a
signal, its readiness and each step reported to the command."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.events import TrainStep
from cua_stream.lifecycle import Notify, freeze_startup_heap, stop_on_signal

log = logging.getLogger(__name__)


async def serve(
    config: TrainerConfig,
    *,
    on_ready: Callable[[int | None], object] = lambda port: None,
    on_step: Callable[[TrainStep], object] | None = None,
) -> None:
    """The process entry: SIGTERM or SIGINT stops after the step in hand, with a final checkpoint."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, stop, "trainer")
        trainer = Trainer(config, on_step=on_step)

        def ready() -> None:
            frozen = freeze_startup_heap()  # the model and torch loaded: out of the collector's way
            log.debug("trainer ready; %d startup objects frozen", frozen)
            on_ready(trainer.metrics_port)

        await trainer.run(stop=stop, task_status=Notify(ready))
        tg.cancel_scope.cancel()
