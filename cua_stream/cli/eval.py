"""`cua-stream eval`: a policy's success on a task set, with intervals, through the path training runs.

Each task instance (task and layout, on layouts training never uses: ``cua_stream.evaluation.plan``)
gets ``--samples`` episodes, run by the real producer (the local desktop, or the scripted environment)
and judged by the real scorer over Kafka. The policy is a scripted one (``--policy oracle``: its replies
forced through the gateway, as ``record-oracle`` records them) or a model (``--model-path``: sampled by
the engine). Prints success with its 95 % interval, pass@k, mean reward, turns and time per task and
overall, and writes every episode to a JSON file; ``--compare A.json B.json`` tells two such runs apart.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import msgspec
import typer
from rich.console import Console

from cua_stream.cli._common import ConfigFile, Prefix, friendly_errors, load_file, output_problem
from cua_stream.cli._eval_report import comparison_table, results_table
from cua_stream.cli._eval_table import (
    BLIND,
    evaluate_each,
    load_runs,
    measure_blind,
    scripted_policies,
    show_table,
)
from cua_stream.cli._stack import (
    Steps,
    broker_and_topics,
    create_topics,
    engine_and_gateway,
    episode_producer,
    out,
    require_playable,
    teacher_stack,
)
from cua_stream.config import BusConfig, build, state_dir
from cua_stream.evaluate import Evaluation, evaluate, publish_report
from cua_stream.evaluation import results as files
from cua_stream.evaluation.plan import EvalPlan, eval_seeds, resolve_tasks
from cua_stream.evaluation.report import report_of
from cua_stream.events import EvalReport
from cua_stream.identity import EVAL_RUN_PREFIX, is_eval_run
from cua_stream.tasks.miniwob import is_miniwob
from cua_stream.topics import EVALS

if TYPE_CHECKING:
    from cua_stream.evaluation.follow import FollowMetrics
    from cua_stream.events import PolicyVersion

FOLLOW_POLL_S = 2.0
"""How often a following evaluation looks for a new version of its run."""


@friendly_errors
def eval_(
    tasks: Annotated[
        str,
        typer.Option(
            help="Comma-separated bundled tasks, 'all', 'miniwob' (the MiniWoB++ suite), miniwob/<name> "
            "or a glob of names (miniwob/click-*), Harbor task directories, globs of them, or dataset "
            "directories (a directory of task directories)."
        ),
    ] = "all",
    samples: Annotated[
        int, typer.Option("--samples", "-k", help="Episodes per task and layout (pass@k's k).")
    ] = 1,
    seeds: Annotated[
        int, typer.Option(help="Layouts per task (evaluation layouts, apart from training's).")
    ] = 2,
    first_seed: Annotated[int, typer.Option(help="Index of the first layout in the evaluation range.")] = 0,
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
    environment: Annotated[
        str, typer.Option(help="local-desktop (Harbor trials on this host; root) or scripted (no desktop).")
    ] = "local-desktop",
    turns: Annotated[int, typer.Option(help="computer-1's turn limit per episode.")] = 10,
    temperature: Annotated[float, typer.Option(help="The model's sampling temperature.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per reply at most.")] = 256,
    success_at: Annotated[float, typer.Option(help="The reward an episode must reach to succeed.")] = 1.0,
    concurrency: Annotated[int, typer.Option(help="Episodes (desktops) at once.")] = 2,
    run_id: Annotated[str, typer.Option(help="The evaluation's run id (default: eval-<time>).")] = "",
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Results JSON (default: <state>/eval/<run>.json).")
    ] = None,
    follow: Annotated[
        str,
        typer.Option(
            help="A training run: evaluate each of its versions as the trainer publishes it (on this "
            "command's own engine, or the run's: --engine), until --until-version; resumable."
        ),
    ] = "",
    every: Annotated[int, typer.Option(help="With --follow: evaluate every N-th version.")] = 1,
    engine: Annotated[
        str,
        typer.Option(
            help="With --follow: 'own' (this command's engine, each version loaded on it) or 'shared' (the "
            "run's, through its gateway --gateway-url: it serves the newest version; training's calls go "
            "first where that gateway bounds engine_max_in_flight)."
        ),
    ] = "own",
    gateway_url: Annotated[str, typer.Option(help="With --engine shared: the run's gateway.")] = "",
    until_version: Annotated[
        int, typer.Option(help="With --follow: stop once this version is evaluated (0: follow until Ctrl-C).")
    ] = 0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="With --follow: serve the evaluation's lag behind training as Prometheus text on this "
            "port (0: any free one)."
        ),
    ] = None,
    compare: Annotated[
        tuple[Path, Path] | None,
        typer.Option(help="Compare two results files (A B): B's success minus A's, per task; runs nothing."),
    ] = None,
    table: Annotated[
        list[Path] | None,
        typer.Option(
            help="Results files (repeat the option) side by side: the benchmark table per task and over "
            "the literature's MiniWoB++ subsets; runs nothing."
        ),
    ] = None,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap", "-b", help="A running Kafka broker (host:port) instead of the local one."
        ),
    ] = None,
    prefix: Prefix = None,
    engine_port: Annotated[int, typer.Option(help="Reference engine port.")] = 30000,
    gateway_port: Annotated[int, typer.Option(help="Session gateway port.")] = 8000,
    policies_port: Annotated[int, typer.Option(help="Scripted-policy server port.")] = 8090,
    config: ConfigFile = None,
) -> None:
    """Evaluate a scripted policy or a model on a task set through the real producer and scorer; print
    success (95 % Wilson interval), pass@k, reward, turns and time per task; write the episodes as JSON.

    Example: cua-stream eval --policy oracle --tasks click-button --environment scripted --seeds 2"""
    if compare is not None:
        a, b = (files.load(path) for path in compare)
        _console().print(comparison_table(a, b, success_at))
        return
    if table:
        show_table(_console(), load_runs(table), success_at, (out_file or table[0]).with_suffix(""))
        return
    shared = _shared(engine, gateway_url, follow)
    plan = _plan(tasks, samples, seeds, first_seed, policy, model_path)
    policies = scripted_policies(plan, policy, model_path, shared or bool(follow))
    tabled = len(policies) > 1 or policies == [BLIND]
    if tabled and follow:
        raise typer.BadParameter(
            "a table of scripted policies has no versions to follow", param_hint="--follow"
        )
    if policies == [BLIND]:  # no episode to run: the shadow pages only
        stem = out_file.with_suffix("") if out_file else state_dir() / "eval" / (run_id or "eval-blind")
        show_table(_console(), {BLIND: measure_blind(plan, run_id or "eval-blind", stem)}, success_at, stem)
        return
    policy = ",".join(p for p in policies if p != BLIND)
    if follow and policy:
        raise typer.BadParameter("a scripted policy has no versions to follow", param_hint="--follow")
    if metrics_port is not None and not (follow and 0 <= metrics_port <= 65535):
        raise typer.BadParameter("a port in 0..65535, with --follow", param_hint="--metrics-port")
    if every < 1:
        raise typer.BadParameter(f"at least 1, not {every}", param_hint="--every")
    if until_version < 0:
        raise typer.BadParameter(f"at least 0 (0: follow until Ctrl-C), not {until_version}",
                                 param_hint="--until-version")  # fmt: skip
    # where the results go, before any episode runs (with --follow: a directory of one file per version)
    if out_file is not None and (problem := output_problem(out_file, directory=bool(follow))):
        raise typer.BadParameter(problem, param_hint="--out")
    # following a run, the default id is the same at every start: a restart resumes the evaluation
    run = run_id or (
        f"{EVAL_RUN_PREFIX}{follow}" if follow else f"{EVAL_RUN_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if not is_eval_run(run):
        raise typer.BadParameter(
            f"an evaluation's run id starts with {EVAL_RUN_PREFIX!r} (no trainer takes such a run)",
            param_hint="--run-id",
        )
    from consumers.trainer.feeder import DEMONSTRATION_SAMPLING, sampling_of
    from cua_stream.demo import tiny_model_dir

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
    bus = _bus(file_data, bootstrap, prefix, step)
    producer = msgspec.structs.replace(producer, bus=bus, lane="eval")  # its own group: beside training
    if shared:
        producer = msgspec.structs.replace(producer, gateway_url=gateway_url)
    step("the policy")
    model = model_path or tiny_model_dir()
    if shared:
        out.print(f"    run {follow}'s versions, as its engine serves them")
    else:
        out.print(f"    {policy or model}" + (f" (forced replies scored by {model})" if policy else ""))
    logs = state_dir() / "eval-logs"
    if shared:
        step(f"evaluating on run {follow}'s engine, through its gateway {gateway_url} (nothing started)")
        stack: AbstractContextManager[Any] = nullcontext()
        sampling = sampling_of(temperature, max_new_tokens)
    elif policy:
        step(f"starting the scripted policies, the engine and the gateway (logs in {logs})")
        stack = teacher_stack(model, bus, engine_port=engine_port, gateway_port=gateway_port,
                              policies_port=policies_port, logs=logs)  # fmt: skip
        sampling = dict(DEMONSTRATION_SAMPLING, max_new_tokens=max_new_tokens)
    else:
        step(f"starting the engine and the gateway (logs in {logs})")
        stack = engine_and_gateway(model, bus, engine_port=engine_port, gateway_port=gateway_port, logs=logs)
        sampling = sampling_of(temperature, max_new_tokens)
    ev = Evaluation(plan=plan, producer=producer, sampling=sampling, teacher=policy or None)
    ctx = _Evaluation(ev=ev, label=policy or str(model), success_at=success_at,
                      out=out_file or state_dir() / "eval" / (run if follow else f"{run}.json"))  # fmt: skip
    if tabled:
        stem = out_file.with_suffix("") if out_file else state_dir() / "eval" / run

        async def one(ev: Evaluation, run_id: str, path: Path) -> None:
            await _evaluate(
                _Evaluation(ev=ev, label=str(ev.teacher), success_at=success_at, out=path), run_id, None
            )

        with stack:
            runs = anyio.run(evaluate_each, one, ev, run, policy.split(","), stem)
        if BLIND in policies:
            runs[BLIND] = measure_blind(plan, f"{run}-blind", stem)
        show_table(_console(), runs, success_at, stem)
        return
    with stack:
        step(
            f"evaluating {plan.episodes} episode(s)"
            + (f" per version of run {follow} (every {every})" if follow else "")
            + f": {len(plan.tasks)} task(s) x {len(plan.seeds)} layout(s) x {plan.samples} sample(s), "
            f"{concurrency} at once, up to {turns} turns"
        )
        if follow:
            urls = None if shared else (f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gateway_port}")
            if anyio.run(_follow, ctx, run, follow, every, until_version, urls, metrics_port):
                out.print("interrupted: the engine and gateway stop")
                raise typer.Exit(130)
        else:
            anyio.run(_evaluate, ctx, run, None)


@dataclass(frozen=True)
class _Evaluation:
    """What each evaluation of this command runs (``ev``), how its results read and where they go."""

    ev: Evaluation
    label: str
    success_at: float
    out: Path
    """The results file; following a run, the directory of one file per version."""


async def _evaluate(ctx: _Evaluation, run: str, version: PolicyVersion | None) -> EvalReport:
    """One evaluation (``cua_stream.evaluate.evaluate``): the table printed, the results published and
    written (the report returned). Published first: a file that cannot be written loses no results."""
    results = await evaluate(ctx.ev, run, version.weights_path if version else ctx.label)
    _console().print(results_table(results, ctx.success_at))
    bus = ctx.ev.producer.bus
    report = report_of(results, success_at=ctx.success_at, version=version)
    await publish_report(bus, report)
    out.print(f"Results published to [bold]{bus.topics().name_of(EVALS)}[/bold] (the dashboard's eval panel)")
    path = ctx.out / f"v{version.version}.json" if version else ctx.out
    files.save(path, results)
    out.print(f"Episodes written to [bold]{path}[/bold]")
    return report


async def _follow(
    ctx: _Evaluation, run: str, of_run: str, every: int, until: int, urls: tuple[str, str] | None,
    metrics_port: int | None,
) -> bool:  # fmt: skip
    """Evaluate ``of_run``'s versions as they are published: load each on this command's engine (its own:
    the run's engines never wait for an evaluation; ``urls`` None: the run's own engine serves it), evaluate
    it, publish the results; a version this
    evaluation has results for (an earlier start's) is not evaluated again. With ``metrics_port``, how
    far behind the run it is, on ``/metrics`` (``evaluation.follow.FollowMetrics``). SIGINT or SIGTERM
    cancels it, through anyio's cancel scope (level-triggered: a Kafka client's teardown that swallowed the
    event loop's one-shot cancellation left the command running after Ctrl-C); True when it was."""
    from cua_stream.evaluation.follow import FollowMetrics
    from cua_stream.lifecycle import stop_on_signal
    from cua_stream.metrics import serve_metrics

    metrics, stop = FollowMetrics(of_run), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, stop, "eval --follow")

        async def cancel_on_stop() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_on_stop)
        if metrics_port is not None:
            port = await tg.start(serve_metrics, metrics.render, "127.0.0.1", metrics_port)
            out.print(f"    the evaluation's lag on [bold]http://127.0.0.1:{port}/metrics[/bold]")
        await _follow_versions(ctx, run, of_run, every, until, urls, metrics)
        tg.cancel_scope.cancel()
    return stop.is_set()


async def _follow_versions(
    ctx: _Evaluation, run: str, of_run: str, every: int, until: int, urls: tuple[str, str] | None,
    metrics: FollowMetrics,
) -> None:  # fmt: skip
    import httpx

    from consumers.trainer.weights import push_weights
    from cua_stream.bus.reader import scan
    from cua_stream.evaluation.follow import due, evaluated_versions, version_run, waiting_line
    from cua_stream.topics import POLICY

    bus = ctx.ev.producer.bus
    reports = [d.event async for d in scan(bus, EVALS)]
    done = evaluated_versions([r for r in reports if isinstance(r, EvalReport)], run, of_run)
    if done:
        out.print(f"    versions already evaluated by {run}: {', '.join(f'v{v}' for v in sorted(done))}")
    waiting = False
    async with httpx.AsyncClient() as http:
        while not (until and max(done, default=0) >= until):
            published: list[PolicyVersion] = [d.event async for d in scan(bus, POLICY)]  # type: ignore[misc]
            policies = [p for p in published if p.run_id == of_run]
            metrics.seen(policies, done)
            version = due(policies, done, every)
            if version is None:
                if not waiting:
                    line = waiting_line(of_run, published, done, every, bus.topics().name_of(POLICY))
                    out.print(f"    {line}", markup=False)
                waiting = True
                await anyio.sleep(FOLLOW_POLL_S)
                continue
            waiting = False
            out.print(f"[bold]v{version.version}[/bold] of {of_run}: {version.weights_path}")
            if urls is not None:
                await push_weights(http, engine_url=urls[0], gateway_url=urls[1],
                                   weights=Path(version.weights_path), version=version.version)  # fmt: skip
            metrics.reported(await _evaluate(ctx, version_run(run, version.version), version))
            if urls is None:
                served = await served_versions(bus, version_run(run, version.version))
                out.print(f"    served by the run's engine at version(s) {', '.join(f'v{v}' for v in served)}"
                          + ("" if served == [version.version] else " (the run moved on meanwhile)"))  # fmt: skip
            done.add(version.version)


def _shared(engine: str, gateway_url: str, follow: str) -> bool:
    """``--engine``: whether the evaluation runs on the followed run's engine (checked with its options)."""
    if engine not in ("own", "shared"):
        raise typer.BadParameter("'own' or 'shared'", param_hint="--engine")
    if engine == "own":
        if gateway_url:
            raise typer.BadParameter("only with --engine shared", param_hint="--gateway-url")
        return False
    if not follow:
        raise typer.BadParameter("shared with a training run: give it with --follow", param_hint="--engine")
    if not gateway_url.startswith(("http://", "https://")):
        raise typer.BadParameter("the run's gateway, an http(s) URL", param_hint="--gateway-url")
    return True


async def served_versions(bus: BusConfig, run: str) -> list[int]:
    """The weight versions the engine served an evaluation's calls at (its turns say)."""
    from cua_stream.bus.reader import scan
    from cua_stream.topics import TURNS

    return sorted({d.event.policy_version async for d in scan(bus, TURNS) if d.event.run_id == run})


def _plan(
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


def _console() -> Console:
    """Where the tables go: the terminal, or 160 columns where the output is not one (a log, a pipe),
    so that a table of ten columns is not squeezed into 80."""
    return out if out.is_terminal else Console(highlight=False, width=160)
