"""``cua-stream retrain``'s training: a planned retrain (``consumers.trainer.retrain``) run by the trainer
daemon, a line per step as it is published."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from consumers.trainer.retrain.prepare import RetrainPlan
    from cua_stream.events import TrainStep


def train(plan: RetrainPlan, say: Callable[[str], None]) -> None:
    """Put the first step's weights in place (``prepare_start``) and train ``plan``'s steps as its new run;
    ``say`` gets each step's line, then where the run is."""
    import anyio
    from transformers.utils import logging as hf_logging

    from consumers.trainer.entry import serve
    from consumers.trainer.retrain.plan import step_line
    from consumers.trainer.retrain.prepare import prepare_start

    prepare_start(plan)
    cfg = plan.config
    hf_logging.disable_progress_bar()  # a checkpoint's save would draw one: each step's line says more

    def step(record: TrainStep) -> None:
        say(step_line(record, plan.recorded.steps.get(record.step)))

    anyio.run(functools.partial(serve, cfg, on_step=step))
    say(
        f"{cfg.run_id}: steps {min(plan.batches)}..{max(plan.batches)} trained (checkpoints in "
        f"{cfg.checkpoints}); side by side: cua-stream runs compare {cfg.retrain_of} {cfg.run_id}"
    )
