"""`cua-stream demo`: the embedded local demo (the main job: docs/tutorials/first-run.md); its options
checked here, the run itself is ``cua_stream.app.demo_run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cua_stream.app.demo_run import run_demo
from cua_stream.cli.common import ConfigFile, friendly_errors, load_file


@friendly_errors
def demo(
    steps: Annotated[int, typer.Option(help="GRPO steps to train (one group of one bundled task each).")] = 3,
    group_size: Annotated[int, typer.Option(help="Episodes per group.")] = 2,
    turns: Annotated[int, typer.Option(help="computer-1's turn limit per episode.")] = 3,
    concurrency: Annotated[int, typer.Option(help="Episodes (desktops) at once.")] = 2,
    environment: Annotated[
        str,
        typer.Option(
            help="local-desktop (Harbor trials in namespaces of this host; root), docker (Harbor's docker "
            "environment on cua-stream's private daemon, started and its images built here; root) or "
            "scripted (no desktop)."
        ),
    ] = "local-desktop",
    follow_after: Annotated[
        float, typer.Option("--follow", help="Keep tapping this many seconds after the run (Ctrl-C stops).")
    ] = 0.0,
    engine_port: Annotated[int, typer.Option(help="Reference engine port.")] = 30000,
    gateway_port: Annotated[int, typer.Option(help="Session gateway port.")] = 8000,
    keep_broker: Annotated[bool, typer.Option(help="Leave the broker running afterwards.")] = True,
    engine_url: Annotated[
        str | None,
        typer.Option(
            help="Use the engine already serving the tiny model here (SGLang on a GPU host: "
            "scripts/gpu-check.sh) instead of starting the reference engine; each step's weights are "
            "loaded on it."
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Also write the run's numbers here as JSON: each step's metrics, episodes per minute."
        ),
    ] = None,
    trainer_backend: Annotated[
        str,
        typer.Option(
            help="trainer.backend: torch, or megatron (megatron-bridge's Qwen3-VL in its own venv, "
            "scripts/megatron-env.sh)."
        ),
    ] = "torch",
    trainer_device: Annotated[
        str, typer.Option(help="trainer.device: cpu, or cuda (the megatron backend on a GPU, in bf16).")
    ] = "cpu",
    config: ConfigFile = None,
) -> None:
    """The whole loop on one machine: broker, topics, engine + gateway (tiny Qwen3-VL), the rollout producer
    (Harbor computer-1 trials on the local desktop, bundled tasks), the scorer, the GRPO trainer (torch or megatron,
    new weights loaded on the engine each step) and a live tap; every event prints as it lands.

    Example: cua-stream demo --steps 3"""
    from consumers.trainer.config import device_error
    from cua_stream.app.demo import DemoPlan

    if trainer_backend not in ("torch", "megatron"):  # before anything starts
        raise typer.BadParameter(f"{trainer_backend!r}: torch or megatron", param_hint="--trainer-backend")
    if error := device_error(trainer_backend, trainer_device):
        raise typer.BadParameter(error, param_hint="--trainer-device")
    plan = DemoPlan(
        steps=steps,
        group_size=group_size,
        turns=turns,
        concurrency=concurrency,
        trainer_backend=trainer_backend,
        trainer_device=trainer_device,
    )
    run_demo(plan, load_file(config), environment=environment, follow_after=follow_after,
             engine_port=engine_port, gateway_port=gateway_port, keep_broker=keep_broker,
             engine_url=engine_url, report=report)  # fmt: skip
