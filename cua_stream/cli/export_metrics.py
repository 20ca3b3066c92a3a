"""`cua-stream export-metrics`: a run's steps and drops, from the train_steps topic, as TensorBoard or
W&B scalars (the same mapping and writers as the trainer's ``trainer.metrics_sinks``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from cua_stream.bus.reader import scan
from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, make_bus, output_problem
from cua_stream.config import BusConfig
from cua_stream.events import Event, GroupDropped, TrainStep
from cua_stream.metrics_sinks import SinkSpec
from cua_stream.metrics_writers import MetricsSink, open_writer
from cua_stream.topics import TRAIN_STEPS, WORK

out = Console(highlight=False, soft_wrap=True)


async def run_records(bus: BusConfig, run_id: str) -> list[Event]:
    """The run's work requests (the version each group was issued under: its staleness), then its
    records on the train_steps topic in log order (keyed by run id: one partition holds them all)."""
    work = [d.event async for d in scan(bus, WORK) if d.event.run_id == run_id]
    return work + [d.event async for d in scan(bus, TRAIN_STEPS) if d.event.run_id == run_id]


@friendly_errors
def export_metrics(
    run: Annotated[str, typer.Option("--run", "-r", help="The run id (the trainer's trainer.run_id).")],
    to: Annotated[
        tuple[str, Path],
        typer.Option("--to", help="KIND DIR: 'tensorboard DIR' (event files in DIR/<run>) or 'wandb DIR'."),
    ],
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Write a run's train steps and drops as scalars; steps DIR already holds are not written again.
    ``--to wandb DIR`` writes offline W&B runs instead.

    Example: cua-stream export-metrics --run r1 --to tensorboard runs/"""
    kind, where = to
    spec = SinkSpec.parse(f"{kind}:{where}")
    if problem := output_problem(where, directory=True):  # before the run's records are read
        raise typer.BadParameter(problem, param_hint="--to")
    bus = make_bus(bootstrap, prefix, config)
    records = anyio.run(run_records, bus, run)
    sink = MetricsSink(open_writer(spec, run))
    try:
        written = sink.write(records)
    finally:
        sink.close()
    if not any(isinstance(r, TrainStep | GroupDropped) for r in records):
        out.print(f"run {run!r}: no records on {bus.topics().name_of(TRAIN_STEPS)}")
        return
    steps = len({r.step for r in records if isinstance(r, TrainStep)})
    held = f"; {sink.waiting} drop(s) wait for the run's next step" if sink.waiting else ""
    span = f"steps {written[0]}..{written[-1]}" if written else "no new step"
    out.print(f"run {run!r}: wrote {len(written)} of {steps} step(s) ({span}) to {spec.kind} {where}{held}")
