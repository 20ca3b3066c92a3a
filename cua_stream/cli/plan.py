"""`cua-stream plan`: what a deployment of many GPUs needs around its engines (gateways, producer
processes, partitions, brokers, object-store bandwidth), from measured per-core costs. Parses and prints;
the model is ``cua_stream.capacity``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cua_stream.capacity import MEASURED, Deployment, load_costs, plan, render
from cua_stream.cli.common import friendly_errors
from cua_stream.cli.defaults import plan_option


@friendly_errors
def plan_command(
    gpus: Annotated[int, typer.Option(help="GPUs, one engine each.")],
    episodes_per_gpu: Annotated[
        int | None, plan_option(Deployment, "episodes_per_gpu", help="Episodes in flight per GPU.")
    ] = None,
    turns: Annotated[
        int | None, plan_option(Deployment, "turns_per_episode", "--turns", help="Turns per episode.")
    ] = None,
    screenshot_kb: Annotated[
        float | None, plan_option(Deployment, "screenshot_kb", help="One screenshot's size, KB.")
    ] = None,
    turn_s: Annotated[
        float | None,
        plan_option(Deployment, "turn_s", help="Seconds per turn, generation and action (assumed)."),
    ] = None,
    costs: Annotated[
        Path | None,
        typer.Option(
            help="Per-core costs JSON (bench/stream_load.py --costs-out); unset: bench/costs.json's."
        ),
    ] = None,
) -> None:
    """Print the gateways, producer processes, turn-topic partitions, brokers and object-store MB/s a
    deployment needs, each with its formula, from the gateway's measured per-core costs and the
    assumptions docs/capacity.md states.

    Example: cua-stream plan --gpus 1000 --episodes-per-gpu 16 --turns 30 --screenshot-kb 150"""
    given = dict(
        episodes_per_gpu=episodes_per_gpu, turns_per_episode=turns, screenshot_kb=screenshot_kb, turn_s=turn_s
    )
    deployment = Deployment(gpus=gpus, **{k: v for k, v in given.items() if v is not None})
    if costs is not None:
        try:
            text = costs.read_text()
        except OSError as e:
            raise ValueError(f"--costs {costs}: {e.strerror or e}") from None
        measured = load_costs(text)
    else:
        measured = MEASURED
    typer.echo(render(plan(deployment, measured), measured))
