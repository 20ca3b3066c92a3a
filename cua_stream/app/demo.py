"""The embedded local demo's plan: the trainer it runs, the work, and the tiny model it serves.

The demo runs the whole loop: the trainer issues work requests on the work topic, the rollout producer
runs each as a Harbor computer-1 trial on the local desktop (a bundled task, its layout drawn from the group's seed),
through the session gateway and the CPU engine (a tiny random Qwen3-VL), and the exactly-once scorer.
A random policy earns 0 on every task: a reply cut at the token cap ends its episode with reward 0
(``token_cap``), the others run to the turn limit and the verifier says 0 (``ok``); the trainer joins each
group's turns and scores, trains a GRPO step and loads the weights on the engine. The tasks' own oracle
(``cua_stream.tasks.policies``) shows they can be solved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cua_stream.config import BusConfig, cache_dir
from cua_stream.tasks import TASKS
from producers.config import PRODUCER_DEFAULTS

if TYPE_CHECKING:
    from consumers.trainer.config import TrainerConfig

MODEL_DIR_NAME = "tiny-qwen3-vl-v1"
TEMPERATURE = 1.0


@dataclass(frozen=True)
class DemoPlan:
    steps: int = 3
    """GRPO steps, one group each."""
    group_size: int = 2
    turns: int = 3
    concurrency: int = PRODUCER_DEFAULTS["concurrency"]
    max_new_tokens: int = 8
    """A random policy's reply often runs past a few tokens: those episodes end at the token cap."""
    trainer_backend: str = "torch"
    """``trainer.backend``: ``torch``, or ``megatron`` (megatron-bridge's Qwen3-VL in its own venv)."""
    trainer_device: str = "cpu"
    """``trainer.device``: where the megatron backend trains (``cuda``: a GPU, in bf16)."""


def tiny_model_dir() -> Path:
    """The demo's model, built once (offline, a few seconds) into the user cache."""
    path = cache_dir() / "models" / MODEL_DIR_NAME
    if not (path / "config.json").exists():
        from cua_stream.models.tiny import make_tiny_model

        make_tiny_model(path)
    return path


def demo_settings(plan: DemoPlan) -> dict[str, dict[str, Any]]:
    """The demo's settings per daemon section (also the ``local-demo`` launch preset)."""
    return {
        "producer": {
            "concurrency": plan.concurrency,
            "max_turns": plan.turns,
            "drain_timeout_s": 120.0,  # at the end, episodes in hand finish (or are abandoned, saying so)
        },
        "trainer": {
            "tasks": list(TASKS),
            "group_size": plan.group_size,
            "groups_per_step": 1,
            "max_staleness": 1,
            "max_steps": plan.steps,
            "temperature": TEMPERATURE,
            "max_new_tokens": plan.max_new_tokens,
            "lr": 1e-4,
            "backend": plan.trainer_backend,
            "device": plan.trainer_device,
        },
    }


def trainer_config(
    run_id: str, plan: DemoPlan, model: Path, engine_url: str, gateway_url: str, bus: BusConfig
) -> TrainerConfig:
    """The demo's trainer: one group per step, the bundled tasks in turn, weights pushed to the engine."""
    from consumers.trainer.config import TrainerConfig

    return TrainerConfig(
        run_id=run_id,
        model_path=str(model),
        engine_url=engine_url,
        gateway_url=gateway_url,
        bus=bus,
        **demo_settings(plan)["trainer"],
    )
