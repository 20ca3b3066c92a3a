"""What `cua-stream eval run` and `eval follow` share on the command line: their common options, the
checks of what they are given (each bad value named, before anything starts) and the scripted policies
`eval run` evaluates."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cua_stream.app.evaluate.benchmark_table import BLIND, TABLE_POLICIES
from cua_stream.app.stack import out
from cua_stream.cli.common import output_problem, require_playable
from cua_stream.evaluation.plan import EvalPlan, eval_seeds, resolve_tasks
from cua_stream.identity import EVAL_RUN_PREFIX, is_eval_run
from cua_stream.tasks.miniwob import is_miniwob

Tasks = Annotated[
    str,
    typer.Option(
        help="Comma-separated bundled tasks, 'all', 'miniwob' (the MiniWoB++ suite), miniwob/<name> "
        "or a glob of names (miniwob/click-*), Harbor task directories, globs of them, or dataset "
        "directories (a directory of task directories)."
    ),
]
Samples = Annotated[int, typer.Option("--samples", "-k", help="Episodes per task and layout (pass@k's k).")]
Seeds = Annotated[int, typer.Option(help="Layouts per task (evaluation layouts, apart from training's).")]
FirstSeed = Annotated[int, typer.Option(help="Index of the first layout in the evaluation range.")]
Turns = Annotated[int, typer.Option(help="computer-1's turn limit per episode.")]
Temperature = Annotated[float, typer.Option(help="The model's sampling temperature.")]
MaxNewTokens = Annotated[int, typer.Option(help="Tokens per reply at most.")]
SuccessAt = Annotated[float, typer.Option(help="The reward an episode must reach to succeed.")]
Concurrency = Annotated[int, typer.Option(help="Episodes (desktops) at once.")]
Broker = Annotated[
    str | None,
    typer.Option("--bootstrap", "-b", help="A running Kafka broker (host:port) instead of the local one."),
]
EnginePort = Annotated[int, typer.Option(help="Reference engine port.")]
GatewayPort = Annotated[int, typer.Option(help="Session gateway port.")]


def checked_plan(
    tasks: str, samples: int, seeds: int, first_seed: int, policy: str, model_path: Path | None
) -> EvalPlan:
    """The options checked, each bad one named."""
    from cua_stream.tasks.policy_server import POLICIES

    named = [p.strip() for p in policy.split(",") if p.strip()]
    if unknown := [p for p in named if p not in (*POLICIES, BLIND)]:
        raise typer.BadParameter(f"unknown scripted policy {unknown[0]!r}; known: {', '.join(POLICIES)}, {BLIND}",
                                 param_hint="--policy")  # fmt: skip
    if model_path is not None and not (model_path / "config.json").is_file():
        raise typer.BadParameter(
            f"{model_path} is not a saved model (no config.json)", param_hint="--model-path"
        )
    if samples < 1:
        raise typer.BadParameter("at least 1", param_hint="--samples")
    try:
        chosen = resolve_tasks(tasks)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--tasks") from None
    try:
        layouts = eval_seeds(first_seed, seeds)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--seeds/--first-seed") from None
    plan = EvalPlan(tasks=tuple(chosen), samples=samples, seeds=tuple(layouts))
    if BLIND in named and not all(is_miniwob(t.name) for t in plan.tasks):
        raise typer.BadParameter(
            f"{BLIND} (the best fixed click) is measured on MiniWoB++ tasks only", param_hint="--policy"
        )
    if len(named) == 1 and named != [BLIND]:
        require_playable(named[0], [t.name for t in plan.tasks], "--tasks")
    return plan


def check_out(out_file: Path | None, *, directory: bool) -> None:
    """Where the results go, checked before any episode runs (following a run: a directory of one file per
    version)."""
    if out_file is not None and (problem := output_problem(out_file, directory=directory)):
        raise typer.BadParameter(problem, param_hint="--out")


def check_run_id(run: str) -> str:
    if not is_eval_run(run):
        raise typer.BadParameter(
            f"an evaluation's run id starts with {EVAL_RUN_PREFIX!r} (no trainer takes such a run)",
            param_hint="--run-id",
        )
    return run


def scripted_policies(plan: EvalPlan, policy: str, model_path: Path | None, follows: bool) -> list[str]:
    """The scripted policies evaluated (``blind`` among them: the best fixed click): those named; none for
    a model; for a MiniWoB++ task set with neither, the benchmark table's (the teacher, idle, random and
    the blind baseline)."""
    if policy:
        return [p.strip() for p in policy.split(",") if p.strip()]
    if model_path is not None or follows:
        return []
    if all(is_miniwob(t.name) for t in plan.tasks):
        out.print(
            f"    no policy named: the MiniWoB++ table ({', '.join(TABLE_POLICIES)}, and the blind baseline)"
        )
        return list(TABLE_POLICIES)
    raise typer.BadParameter(
        "give a scripted policy (--policy) or a model (--model-path)", param_hint="--policy"
    )
