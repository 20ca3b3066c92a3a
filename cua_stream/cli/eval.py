"""`cua-stream eval`: a policy's success on a task set, with intervals, through the path training runs.

``eval run``: each task instance (task and layout, on layouts training never uses:
``cua_stream.evaluation.plan``) gets ``--samples`` episodes, run by the real producer (the local desktop,
Docker, or the scripted environment) and judged by the real scorer over Kafka. The policy is a scripted
one (``--policy oracle``: its replies forced through the gateway, as ``record-oracle`` records them) or a
model (``--model-path``: sampled by the engine). Prints success with its 95 % interval, pass@k, mean
reward, turns and time per task and overall, and writes every episode to a JSON file. ``eval follow RUN``
evaluates a training run's versions as they are published; ``eval compare A B`` tells two results files
apart; ``eval table F...`` puts results files side by side. The spellings before these subcommands
(``eval --follow RUN``, ``eval --compare A B``, ...) still run (``cli._eval_spellings``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from cua_stream.app.evaluate.benchmark_table import BLIND, load_runs, show_table
from cua_stream.app.evaluate.results_table import comparison_table
from cua_stream.app.evaluate.run import console, evaluate_blind, evaluate_policies
from cua_stream.cli._eval_spellings import EvalGroup
from cua_stream.cli.common import ConfigFile, EpisodeEnvironment, Prefix, friendly_errors, load_file
from cua_stream.cli.eval_follow import follow
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
    scripted_policies,
)
from cua_stream.evaluation import results as files
from cua_stream.identity import EVAL_RUN_PREFIX

app = typer.Typer(
    cls=EvalGroup,
    help="Evaluate a policy on a task set through the real producer and scorer (run), each version of a "
    "training run as it is published (follow); compare results files (compare, table).\n\n"
    "Example: cua-stream eval run --policy oracle --tasks click-button --environment scripted --seeds 2",
    no_args_is_help=True,
)


@app.command("run")
@friendly_errors
def run(
    tasks: Tasks = "all",
    samples: Samples = 1,
    seeds: Seeds = 2,
    first_seed: FirstSeed = 0,
    policy: Annotated[
        str,
        typer.Option(
            help="A scripted policy: oracle (the bundled tasks' oracle, the MiniWoB++ teacher), nothing, "
            "idle or random (uniform clicks)."
        ),
    ] = "",
    model_path: Annotated[
        Path | None,
        typer.Option(
            help="The model evaluated (a saved Qwen3-VL); with --policy, the one that scores the "
            "forced replies (default: the demo's tiny model)."
        ),
    ] = None,
    environment: EpisodeEnvironment = "local-desktop",
    turns: Turns = 10,
    temperature: Temperature = 1.0,
    max_new_tokens: MaxNewTokens = 256,
    success_at: SuccessAt = 1.0,
    concurrency: Concurrency = 2,
    run_id: Annotated[str, typer.Option(help="The evaluation's run id (default: eval-<time>).")] = "",
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Results JSON (default: <state>/eval/<run>.json).")
    ] = None,
    bootstrap: Broker = None,
    prefix: Prefix = None,
    engine_port: EnginePort = 30000,
    gateway_port: GatewayPort = 8000,
    policies_port: Annotated[int, typer.Option(help="Scripted-policy server port.")] = 8090,
    config: ConfigFile = None,
) -> None:
    """Evaluate a scripted policy or a model on a task set through the real producer and scorer; print
    success (95 % Wilson interval), pass@k, reward, turns and time per task; write the episodes as JSON.

    Example: cua-stream eval run --policy oracle --tasks click-button --environment scripted --seeds 2"""
    plan = checked_plan(tasks, samples, seeds, first_seed, policy, model_path)
    policies = scripted_policies(plan, policy, model_path, False)
    if policies == [BLIND]:  # no episode to run: the shadow pages only
        evaluate_blind(plan, run_id or "eval-blind", out_file, success_at)
        return
    check_out(out_file, directory=False)
    run = check_run_id(run_id or f"{EVAL_RUN_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}")
    evaluate_policies(plan, policies, run, model_path=model_path, out_file=out_file, file_data=load_file(config),
                      bootstrap=bootstrap, prefix=prefix, environment=environment, turns=turns,
                      temperature=temperature, max_new_tokens=max_new_tokens, success_at=success_at,
                      concurrency=concurrency, engine_port=engine_port, gateway_port=gateway_port,
                      policies_port=policies_port)  # fmt: skip


app.command("follow")(follow)


@app.command("compare")
@friendly_errors
def compare(
    before: Annotated[Path, typer.Argument(metavar="A", help="The first results file (the baseline).")],
    after: Annotated[Path, typer.Argument(metavar="B", help="The second results file.")],
    success_at: SuccessAt = 1.0,
) -> None:
    """Tell two evaluations apart: per task and overall, B's success minus A's with its 95 % interval and
    whether it is clear of zero; runs nothing.

    Example: cua-stream eval compare base.json tuned.json"""
    console().print(comparison_table(files.load(before), files.load(after), success_at))


@app.command("table")
@friendly_errors
def table(
    results: Annotated[list[Path], typer.Argument(help="Results files, one column each.")],
    success_at: SuccessAt = 1.0,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where the table is written: <stem>-table.md and .json (default: beside the first file).",
        ),
    ] = None,
) -> None:
    """Results files side by side: the benchmark table per task and over the literature's MiniWoB++
    subsets, printed and written as Markdown and JSON; runs nothing.

    Example: cua-stream eval table oracle.json idle.json --out benchmark.json"""
    show_table(console(), load_runs(results), success_at, (out_file or results[0]).with_suffix(""))
