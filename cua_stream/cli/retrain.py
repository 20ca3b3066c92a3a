"""`cua-stream retrain`: a run's logged batches trained again under other settings, as a new run."""

from __future__ import annotations

from typing import Annotated

import typer

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, make_bus, set_log_level


@friendly_errors
def retrain(
    source: Annotated[str, typer.Option("--from", help="The run whose recorded steps to train again.")],
    run_id: Annotated[str, typer.Option(help="The new run: its steps, versions and checkpoint.")],
    steps: Annotated[
        str, typer.Option(help="The recorded steps to train again: A..B, A.., ..B or A (default: all).")
    ] = "",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="trainer.KEY=VALUE: a setting other than the source run's (VALUE as JSON where it is: "
            "0.3, true, null); repeatable.",
        ),
    ] = None,
    start: Annotated[
        str,
        typer.Option(
            help="The first step's weights: vN (the source run's, after its step N), a trainer checkpoint "
            "directory or a model directory (default: those the first retrained step started from)."
        ),
    ] = "",
    batches_from: Annotated[
        str | None,
        typer.Option(help="The topic prefix of the source run's step records (default: --prefix's)."),
    ] = None,
    checkpoint_dir: Annotated[
        str | None, typer.Option(help="The new run's checkpoints (default: <state dir>/trainer/RUN-ID).")
    ] = None,
    rejudge: Annotated[
        bool,
        typer.Option(
            help="Decide the recorded groups again under the new settings (staleness bound, discard policy, "
            "max_seq_len may then change): a group they drop is left out of its step, listed there."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Show the plan and the settings changed; train nothing.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "WARNING",
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Train each recorded step's batch of --from's run again, under its own settings from its log with
    the --set ones changed, from the weights --start names; publish the steps and versions as --run-id's,
    marked a retrain of it. Run again to resume after a kill: no step is lost or trained twice.

    Example: cua-stream retrain --from r1 --run-id r1-kl --set trainer.kl_coef=0.3 --dry-run"""
    import anyio

    from consumers.trainer.retrain.prepare import RetrainRequest, plan_lines, plan_retrain
    from cua_stream.app.retrain import train

    set_log_level(log_level)
    bus = make_bus(bootstrap, prefix, config)  # only its [bus] section: the settings are the run's own
    request = RetrainRequest(
        source_run=source, run_id=run_id, steps=steps, overrides=tuple(set_ or ()), start=start,
        batches_from=batches_from or "", checkpoint_dir=checkpoint_dir or "", rejudge=rejudge,
    )  # fmt: skip
    plan = anyio.run(plan_retrain, bus, request)
    print("\n".join(plan_lines(plan)), flush=True)
    if dry_run:
        return
    train(plan, say=lambda line: print(line, flush=True))
