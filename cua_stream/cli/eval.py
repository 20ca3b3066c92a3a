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
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated

import anyio
import typer

from cua_stream.cli._common import ConfigFile, Prefix, friendly_errors
from cua_stream.cli._eval_follow import follow
from cua_stream.cli._eval_report import comparison_table
from cua_stream.cli._eval_setup import (
    Broker,
    Concurrency,
    EnginePort,
    Evaluating,
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
    console,
    evaluate_once,
    evaluating_line,
    producer_on_bus,
)
from cua_stream.cli._eval_spellings import EvalGroup
from cua_stream.cli._eval_table import (
    BLIND,
    evaluate_each,
    load_runs,
    measure_blind,
    scripted_policies,
    show_table,
)
from cua_stream.cli._stack import EpisodeEnvironment, engine_and_gateway, out, teacher_stack
from cua_stream.config import state_dir
from cua_stream.evaluate import Evaluation
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
    from consumers.trainer.stream.feeder import DEMONSTRATION_SAMPLING, sampling_of
    from cua_stream.demo import tiny_model_dir

    plan = checked_plan(tasks, samples, seeds, first_seed, policy, model_path)
    policies = scripted_policies(plan, policy, model_path, False)
    tabled = len(policies) > 1 or policies == [BLIND]
    if policies == [BLIND]:  # no episode to run: the shadow pages only
        stem = out_file.with_suffix("") if out_file else state_dir() / "eval" / (run_id or "eval-blind")
        show_table(console(), {BLIND: measure_blind(plan, run_id or "eval-blind", stem)}, success_at, stem)
        return
    policy = ",".join(p for p in policies if p != BLIND)
    check_out(out_file, directory=False)
    run = check_run_id(run_id or f"{EVAL_RUN_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}")
    producer, step = producer_on_bus(config, bootstrap, prefix, concurrency=concurrency, turns=turns,
                                     environment=environment, gateway_port=gateway_port)  # fmt: skip
    step("the policy")
    model = model_path or tiny_model_dir()
    out.print(f"    {policy or model}" + (f" (forced replies scored by {model})" if policy else ""))
    logs = state_dir() / "eval-logs"
    stack: AbstractContextManager[object]
    if policy:
        step(f"starting the scripted policies, the engine and the gateway (logs in {logs})")
        stack = teacher_stack(model, producer.bus, engine_port=engine_port, gateway_port=gateway_port,
                              policies_port=policies_port, logs=logs)  # fmt: skip
        sampling = dict(DEMONSTRATION_SAMPLING, max_new_tokens=max_new_tokens)
    else:
        step(f"starting the engine and the gateway (logs in {logs})")
        stack = engine_and_gateway(model, producer.bus, engine_port=engine_port, gateway_port=gateway_port,
                                   logs=logs)  # fmt: skip
        sampling = sampling_of(temperature, max_new_tokens)
    ev = Evaluation(plan=plan, producer=producer, sampling=sampling, teacher=policy or None)
    if tabled:
        stem = out_file.with_suffix("") if out_file else state_dir() / "eval" / run

        async def one(ev: Evaluation, run_id: str, path: Path) -> None:
            await evaluate_once(Evaluating(ev=ev, label=str(ev.teacher), success_at=success_at, out=path),
                                run_id, None)  # fmt: skip

        with stack:
            runs = anyio.run(evaluate_each, one, ev, run, policy.split(","), stem)
        if BLIND in policies:
            runs[BLIND] = measure_blind(plan, f"{run}-blind", stem)
        show_table(console(), runs, success_at, stem)
        return
    ctx = Evaluating(ev=ev, label=policy or str(model), success_at=success_at,
                     out=out_file or state_dir() / "eval" / f"{run}.json")  # fmt: skip
    with stack:
        step(evaluating_line(plan, concurrency, turns))
        anyio.run(evaluate_once, ctx, run, None)


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
