"""What `cua-stream eval run` and `eval follow` share: their common options, the plan's checks, the
producer on its bus, and one evaluation printed, published and saved."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.console import Console

from cua_stream.cli._common import load_file, output_problem
from cua_stream.cli._eval_report import results_table
from cua_stream.cli._eval_table import BLIND
from cua_stream.cli._stack import (
    Steps,
    broker_and_topics,
    create_topics,
    episode_producer,
    out,
    require_playable,
)
from cua_stream.config import BusConfig, build
from cua_stream.evaluate import Evaluation, evaluate, publish_report
from cua_stream.evaluation import results as files
from cua_stream.evaluation.plan import EvalPlan, eval_seeds, resolve_tasks
from cua_stream.evaluation.report import report_of
from cua_stream.events import EvalReport
from cua_stream.identity import EVAL_RUN_PREFIX, is_eval_run
from cua_stream.tasks.miniwob import is_miniwob
from cua_stream.topics import EVALS

if TYPE_CHECKING:
    from cua_stream.events import PolicyVersion
    from producers.config import ProducerConfig

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


@dataclass(frozen=True)
class Evaluating:
    """What each evaluation of a command runs (``ev``), how its results read and where they go."""

    ev: Evaluation
    label: str
    success_at: float
    out: Path
    """The results file; following a run, the directory of one file per version."""


async def evaluate_once(ctx: Evaluating, run: str, version: PolicyVersion | None) -> EvalReport:
    """One evaluation (``cua_stream.evaluate.evaluate``): the table printed, the results published and
    written (the report returned). Published first: a file that cannot be written loses no results."""
    results = await evaluate(ctx.ev, run, version.weights_path if version else ctx.label)
    console().print(results_table(results, ctx.success_at))
    bus = ctx.ev.producer.bus
    report = report_of(results, success_at=ctx.success_at, version=version)
    await publish_report(bus, report)
    out.print(f"Results published to [bold]{bus.topics().name_of(EVALS)}[/bold] (the dashboard's eval panel)")
    path = ctx.out / f"v{version.version}.json" if version else ctx.out
    files.save(path, results)
    out.print(f"Episodes written to [bold]{path}[/bold]")
    return report


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


def producer_on_bus(
    config: Path | None, bootstrap: str | None, prefix: str | None, *, concurrency: int, turns: int,
    environment: str, gateway_port: int,
) -> tuple[ProducerConfig, Steps]:  # fmt: skip
    """The evaluation's producer (its own group, ``lane`` eval: beside training's) on the local broker or
    the one at ``bootstrap``, with the topics made; and the numbered steps it started."""
    file_data = load_file(config)
    producer = episode_producer(
        file_data,
        concurrency=concurrency,
        turns=turns,
        environment=environment,
        gateway_port=gateway_port,
        trials="eval-trials",
    )
    step = Steps(5)
    return msgspec.structs.replace(producer, bus=_bus(file_data, bootstrap, prefix, step), lane="eval"), step


def evaluating_line(plan: EvalPlan, concurrency: int, turns: int, per: str = "") -> str:
    return (
        f"evaluating {plan.episodes} episode(s){per}: {len(plan.tasks)} task(s) x {len(plan.seeds)} "
        f"layout(s) x {plan.samples} sample(s), {concurrency} at once, up to {turns} turns"
    )


def _bus(file_data: dict[str, Any], bootstrap: str | None, prefix: str | None, step: Steps) -> BusConfig:
    """The local broker (started if need be), or the running one at ``bootstrap``; the topics on it (under
    ``prefix``, else the config's)."""
    if bootstrap is None:
        return broker_and_topics(file_data, step, prefix=prefix)[1]
    step(f"using the Kafka broker at {bootstrap}")
    overrides = {"bootstrap_servers": bootstrap, "topic_prefix": prefix}
    bus = build(BusConfig, file_data=file_data, overrides=overrides)
    step("creating the topics")
    create_topics(bus)
    return bus


def console() -> Console:
    """Where the tables go: the terminal, or 160 columns where the output is not one (a log, a pipe),
    so that a table of ten columns is not squeezed into 80."""
    return out if out.is_terminal else Console(highlight=False, width=160)
