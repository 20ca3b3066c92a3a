"""`cua-stream trainer`: GRPO groups from the stream, off-policy bound, lossless resume (torch backend)."""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Any

import typer

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, set_log_level
from cua_stream.cli.defaults import field_option


@friendly_errors
def trainer(
    run_id: Annotated[
        str | None,
        field_option(
            "trainer",
            "run_id",
            help="The run this trainer owns (required: here, in the file or the environment).",
        ),
    ] = None,
    model_path: Annotated[
        str | None, field_option("trainer", "model_path", help="Starting weights and processor directory.")
    ] = None,
    tasks: Annotated[
        str | None,
        field_option(
            "trainer",
            "tasks",
            help="Comma-separated tasks the feeder cycles through: bundled names, 'miniwob' (the MiniWoB++ "
            "suite), miniwob/<name> or a glob of names, Harbor task directories, globs of them or dataset "
            "directories (none: no feeder).",
        ),
    ] = None,
    group_size: Annotated[
        int | None, field_option("trainer", "group_size", help="Episodes per GRPO group.")
    ] = None,
    groups_per_step: Annotated[
        int | None, field_option("trainer", "groups_per_step", help="Groups per optimizer step.")
    ] = None,
    max_staleness: Annotated[
        int | None, field_option("trainer", "max_staleness", help="Versions a group may lag.")
    ] = None,
    on_stale: Annotated[
        str | None,
        field_option(
            "trainer",
            "on_stale",
            help="A group with tokens past --max-staleness: drop_group or mask (those tokens leave the loss, "
            "the rest trains).",
        ),
    ] = None,
    max_steps: Annotated[
        int | None, field_option("trainer", "max_steps", help="Stop after this many steps (0: never).")
    ] = None,
    checkpoint_dir: Annotated[
        str | None, field_option("trainer", "checkpoint_dir", help="Checkpoints and weights directory.")
    ] = None,
    blob_dir: Annotated[
        str | None,
        field_option(
            "trainer",
            "blob_dir",
            help="The gateway's screenshot blob store (a directory or s3://bucket/prefix).",
        ),
    ] = None,
    engine_url: Annotated[
        str | None, field_option("trainer", "engine_url", help="Engine to load new weights on.")
    ] = None,
    gateway_url: Annotated[
        str | None, field_option("trainer", "gateway_url", help="Gateway to drain around weight updates.")
    ] = None,
    metrics_port: Annotated[
        int | None, field_option("trainer", "metrics_port", help="Serve Prometheus text on this port.")
    ] = None,
    metrics_sink: Annotated[
        list[str] | None,
        field_option(
            "trainer",
            "metrics_sinks",
            help="Also write each step's scalars to tensorboard:DIR or wandb:DIR (offline); repeatable.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Issue the run's work, join its turns, summaries and scores into GRPO groups, train, publish the
    weights to the engine and a PolicyVersion; checkpoint so a kill -9 loses and repeats nothing.
    SIGTERM stops after the step in hand.

    Example: cua-stream trainer --run-id r1 --model-path models/tiny --tasks click-button -c run.toml"""
    import anyio

    from consumers.trainer.config import trainer_config
    from consumers.trainer.entry import serve
    from cua_stream.tasks.refs import expand_tasks

    set_log_level(log_level)
    cfg = trainer_config(
        load_file(config),
        overrides={
            "run_id": run_id,
            "model_path": model_path,
            "tasks": expand_tasks(t for t in tasks.split(",") if t) if tasks is not None else None,
            "group_size": group_size,
            "groups_per_step": groups_per_step,
            "max_staleness": max_staleness,
            "on_stale": on_stale,
            "max_steps": max_steps,
            "checkpoint_dir": checkpoint_dir,
            "blob_dir": blob_dir,
            "engine_url": engine_url,
            "gateway_url": gateway_url,
            "metrics_port": metrics_port,
            "metrics_sinks": metrics_sink or None,
        },
        bus_overrides={"bootstrap_servers": bootstrap, "topic_prefix": prefix},
    )

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from consumers.trainer.step_record import describe_step

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]train[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        disable=not console.is_terminal,  # a log line per step instead, below
    )
    task = progress.add_task("waiting for the first groups", total=cfg.max_steps or None)

    def ready(port: int | None) -> None:
        where = f", metrics on :{port}/metrics" if port is not None else ""
        print(f"trainer ready: run {cfg.run_id} at {cfg.checkpoints}{where}", file=sys.stderr, flush=True)

    def step(record: Any) -> None:
        progress.update(task, completed=record.step, description=describe_step(record))
        if not console.is_terminal:
            print(f"step {record.step}: {describe_step(record)}", file=sys.stderr, flush=True)

    if not console.is_terminal:  # in a log file, each checkpoint's save would draw a progress bar
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    with progress:
        anyio.run(functools.partial(serve, cfg, on_ready=ready, on_step=step))
