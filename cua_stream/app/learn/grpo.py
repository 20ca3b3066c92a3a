"""`cua-stream learn`'s GRPO phase: when it stops, what it says it does, and the trainer it runs through the
whole streaming loop (the producer's rollouts, the gateway, the engine, the scorer) until its deadline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from cua_stream.app.learn.plan import LearnPlan
from cua_stream.app.rollouts import rollouts
from cua_stream.app.stack import out

if TYPE_CHECKING:
    from cua_stream.events import TrainStep
    from producers.config import ProducerConfig


WRAP_UP_S = 60.0
"""Kept from the budget for the GRPO step in progress at its end (~20-40 s) and the curve (~10 s), so
the whole command ends within ``--budget-minutes``."""


def grpo_deadline(plan: LearnPlan, started: float, grpo_started: float, eval_s: float) -> float:
    """When GRPO stops taking steps: the step in progress then still finishes, then the GRPO policy's
    evaluation (as long as the SFT policy's took) and the curve, so room is kept for them; with
    ``plan.grpo_minutes``, also that long after GRPO's start (less the room for its last step)."""
    deadline = started + plan.budget_minutes * 60 - WRAP_UP_S - eval_s
    if plan.grpo_minutes is not None:
        deadline = min(deadline, grpo_started + plan.grpo_minutes * 60 - WRAP_UP_S)
    return deadline


def own_bound(plan: LearnPlan) -> str:
    return "" if plan.grpo_minutes is None else f" and {plan.grpo_minutes:g} min of its own"


def sampling_said(plan: LearnPlan) -> str:
    said = f"at temperature {plan.temperature:g}"
    if plan.top_k != -1:
        said += f", top_k {plan.top_k}"
    if plan.min_p:
        said += f", min_p {plan.min_p:g}"
    return said


def update_said(plan: LearnPlan) -> str:
    said = f"lr {plan.lr:g}"
    if plan.lr_warmup_steps:
        said += f" (ramped up over the first {plan.lr_warmup_steps} steps)"
    if plan.negative_scale == 0:
        said += ", the episodes above their group's mean reinforced, the others not pushed down"
    elif plan.negative_scale != 1:
        said += f", negative advantages x {plan.negative_scale:g}"
    if plan.kl_coef:
        said += f", KL {plan.kl_coef:g} to the SFT weights"
    return said


async def train(
    plan: LearnPlan, producer: ProducerConfig, model: Path, engine_url: str, run_id: str, home: Path,
    deadline: float,
) -> list[TrainStep]:  # fmt: skip
    from consumers.trainer.config import TrainerConfig
    from consumers.trainer.daemon import Trainer
    from consumers.trainer.step_record import describe_step

    config = TrainerConfig(
        run_id=run_id, model_path=str(model), engine_url=engine_url, gateway_url=producer.gateway_url,
        bus=producer.bus, checkpoint_dir=str(home / "trainer"), **plan.trainer_settings(),
    )  # fmt: skip
    steps: list[TrainStep] = []

    def on_step(event: TrainStep) -> None:
        steps.append(event)
        out.print(f"    step {event.step}: {describe_step(event)}")

    stop_trainer = anyio.Event()
    async with rollouts(producer) as running:

        async def budget() -> None:
            await anyio.sleep(max(0.0, deadline - time.monotonic()))
            out.print("    the time budget is spent: stopping after the step in progress")
            stop_trainer.set()

        running.task_group.start_soon(budget)
        await Trainer(config, on_step=on_step).run(stop=stop_trainer)
    return steps
