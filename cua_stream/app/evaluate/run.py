"""`cua-stream eval run`'s work once its options are checked, and what it shares with `eval follow`: the
producer on its bus, and one evaluation printed, published and saved. A scripted policy plays through the
teacher (its replies forced through the gateway, scored by the model), a model samples on the engine;
several scripted policies, or the blind baseline, make the benchmark table."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from rich.console import Console

from cua_stream.app.evaluate.benchmark_table import BLIND, evaluate_each, measure_blind, show_table
from cua_stream.app.evaluate.episodes import Evaluation, evaluate, publish_report
from cua_stream.app.evaluate.results_table import results_table
from cua_stream.app.stack import (
    Steps,
    broker_and_topics,
    create_topics,
    engine_and_gateway,
    episode_producer,
    out,
    teacher_stack,
)
from cua_stream.config import BusConfig, build, state_dir
from cua_stream.evaluation import results as files
from cua_stream.evaluation.report import report_of
from cua_stream.events import EvalReport
from cua_stream.topics import EVALS

if TYPE_CHECKING:
    from cua_stream.evaluation.plan import EvalPlan
    from cua_stream.events import PolicyVersion
    from producers.config import ProducerConfig


def evaluate_blind(plan: EvalPlan, run_id: str, out_file: Path | None, success_at: float) -> None:
    """The blind baseline alone: no episode to run, the shadow pages only; its table printed and saved."""
    stem = out_file.with_suffix("") if out_file else state_dir() / "eval" / run_id
    show_table(console(), {BLIND: measure_blind(plan, run_id, stem)}, success_at, stem)


def evaluate_policies(
    plan: EvalPlan, policies: list[str], run: str, *, model_path: Path | None, out_file: Path | None,
    file_data: dict[str, Any], bootstrap: str | None, prefix: str | None, environment: str, turns: int,
    temperature: float, max_new_tokens: int, success_at: float, concurrency: int, engine_port: int,
    gateway_port: int, policies_port: int,
) -> None:  # fmt: skip
    """Evaluate ``policies`` (scripted ones, the blind baseline among them; none: the model at
    ``model_path``, else the demo's tiny model) on ``plan`` under the run id ``run``: one results file
    and table, or with several policies (or the blind baseline) the benchmark table."""
    from consumers.trainer.stream.feeder import DEMONSTRATION_SAMPLING, sampling_of
    from cua_stream.app.demo import tiny_model_dir

    tabled = len(policies) > 1 or policies == [BLIND]
    policy = ",".join(p for p in policies if p != BLIND)
    producer, step = producer_on_bus(file_data, bootstrap, prefix, concurrency=concurrency, turns=turns,
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


@dataclass(frozen=True)
class Evaluating:
    """What each evaluation of a command runs (``ev``), how its results read and where they go."""

    ev: Evaluation
    label: str
    success_at: float
    out: Path
    """The results file; following a run, the directory of one file per version."""


async def evaluate_once(ctx: Evaluating, run: str, version: PolicyVersion | None) -> EvalReport:
    """One evaluation (``cua_stream.app.evaluate.episodes.evaluate``): the table printed, the results published and
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


def producer_on_bus(
    file_data: dict[str, Any], bootstrap: str | None, prefix: str | None, *, concurrency: int, turns: int,
    environment: str, gateway_port: int,
) -> tuple[ProducerConfig, Steps]:  # fmt: skip
    """The evaluation's producer (its own group, ``lane`` eval: beside training's) on the local broker or
    the one at ``bootstrap``, with the topics made (``file_data``: the config file's sections); and the
    numbered steps it started."""
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
