"""`cua-stream eval follow RUN`'s options, checked before anything starts (the work:
``cua_stream.app.evaluate.follow``): each version of a training run evaluated as its trainer publishes it, on
this command's own engine (each version's weights loaded on it) or on the run's (``--engine shared``);
resumable: a version evaluated by an earlier start is not evaluated again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cua_stream.app.evaluate.follow import follow_run
from cua_stream.cli.common import ConfigFile, EpisodeEnvironment, Prefix, friendly_errors, load_file
from cua_stream.cli.eval_options import (
    Broker,
    Concurrency,
    EnginePort,
    FirstSeed,
    GatewayPort,
    MaxNewTokens,
    Samples,
    Seeds,
    SuccessAt,
    Tasks,
    Temperature,
    Turns,
    check_out,
    check_run_id,
    checked_plan,
)
from cua_stream.identity import EVAL_RUN_PREFIX


@friendly_errors
def follow(
    of_run: Annotated[
        str, typer.Argument(metavar="RUN", help="The training run whose versions are evaluated.")
    ],
    tasks: Tasks = "all",
    samples: Samples = 1,
    seeds: Seeds = 2,
    first_seed: FirstSeed = 0,
    model_path: Annotated[
        Path | None,
        typer.Option(
            help="The model this command's engine starts with, each version's weights loaded on it "
            "(default: the demo's tiny model)."
        ),
    ] = None,
    environment: EpisodeEnvironment = "local-desktop",
    turns: Turns = 10,
    temperature: Temperature = 1.0,
    max_new_tokens: MaxNewTokens = 256,
    success_at: SuccessAt = 1.0,
    concurrency: Concurrency = 2,
    run_id: Annotated[
        str, typer.Option(help="The evaluation's run id (default: eval-RUN, so a restart resumes it).")
    ] = "",
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Results directory, one JSON per version (default: <state>/eval/<run id>)."
        ),
    ] = None,
    every: Annotated[int, typer.Option(help="Evaluate every N-th version.")] = 1,
    engine: Annotated[
        str,
        typer.Option(
            help="'own' (this command's engine, each version loaded on it) or 'shared' (the run's, through "
            "its gateway --gateway-url: it serves the newest version; training's calls go first where that "
            "gateway bounds engine_max_in_flight)."
        ),
    ] = "own",
    gateway_url: Annotated[str, typer.Option(help="With --engine shared: the run's gateway.")] = "",
    until_version: Annotated[
        int, typer.Option(help="Stop once this version is evaluated (0: follow until Ctrl-C).")
    ] = 0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve the evaluation's lag behind training as Prometheus text on this port (0: any)."
        ),
    ] = None,
    bootstrap: Broker = None,
    prefix: Prefix = None,
    engine_port: EnginePort = 30000,
    gateway_port: GatewayPort = 8000,
    config: ConfigFile = None,
) -> None:
    """Evaluate each version of a training run as its trainer publishes it (every --every-th, until
    --until-version): the table printed, the results published and written per version; resumable.

    Example: cua-stream eval follow r1 --model-path models/tiny --tasks click-button --every 2"""
    shared = _shared(engine, gateway_url)
    plan = checked_plan(tasks, samples, seeds, first_seed, "", model_path)
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise typer.BadParameter("a port in 0..65535", param_hint="--metrics-port")
    if every < 1:
        raise typer.BadParameter(f"at least 1, not {every}", param_hint="--every")
    if until_version < 0:
        raise typer.BadParameter(f"at least 0 (0: follow until Ctrl-C), not {until_version}",
                                 param_hint="--until-version")  # fmt: skip
    check_out(out_file, directory=True)
    run = check_run_id(run_id or f"{EVAL_RUN_PREFIX}{of_run}")  # the same at every start: a restart resumes
    interrupted = follow_run(
        plan, of_run, run, shared_gateway=gateway_url if shared else None, model_path=model_path,
        out_file=out_file, file_data=load_file(config), bootstrap=bootstrap, prefix=prefix,
        environment=environment, turns=turns, temperature=temperature, max_new_tokens=max_new_tokens,
        success_at=success_at, concurrency=concurrency, every=every, until_version=until_version,
        metrics_port=metrics_port, engine_port=engine_port, gateway_port=gateway_port,
    )  # fmt: skip
    if interrupted:
        raise typer.Exit(130)


def _shared(engine: str, gateway_url: str) -> bool:
    """``--engine``: whether the evaluation runs on the followed run's engine (checked with its options)."""
    if engine not in ("own", "shared"):
        raise typer.BadParameter("'own' or 'shared'", param_hint="--engine")
    if engine == "own":
        if gateway_url:
            raise typer.BadParameter("only with --engine shared", param_hint="--gateway-url")
        return False
    if not gateway_url.startswith(("http://", "https://")):
        raise typer.BadParameter("the run's gateway, an http(s) URL", param_hint="--gateway-url")
    return True
