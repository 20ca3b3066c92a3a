"""`cua-stream eval follow RUN`'s work once its options are checked: each version of a training run
evaluated as its trainer publishes it, on this command's own engine (each version's weights loaded on
it) or on the run's (its gateway given); resumable: a version evaluated by an earlier start is not
evaluated again."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from cua_stream.app.evaluate.episodes import Evaluation
from cua_stream.app.evaluate.run import Evaluating, evaluate_once, evaluating_line, producer_on_bus
from cua_stream.app.stack import engine_and_gateway, out
from cua_stream.config import BusConfig, state_dir
from cua_stream.events import EvalReport
from cua_stream.topics import EVALS

if TYPE_CHECKING:
    from cua_stream.evaluation.follow import FollowMetrics
    from cua_stream.evaluation.plan import EvalPlan
    from cua_stream.events import PolicyVersion

FOLLOW_POLL_S = 2.0
"""How often a following evaluation looks for a new version of its run."""


def follow_run(
    plan: EvalPlan, of_run: str, run: str, *, shared_gateway: str | None, model_path: Path | None,
    out_file: Path | None, file_data: dict[str, Any], bootstrap: str | None, prefix: str | None,
    environment: str, turns: int, temperature: float, max_new_tokens: int, success_at: float,
    concurrency: int, every: int, until_version: int, metrics_port: int | None, engine_port: int,
    gateway_port: int,
) -> bool:  # fmt: skip
    """Evaluate ``of_run``'s versions under the run id ``run`` (every ``every``-th, until ``until_version``;
    0: until a signal) on this command's engine serving ``model_path`` (else the demo's tiny model), or
    with ``shared_gateway`` on the run's own engine through that gateway; True when a signal ended it."""
    from consumers.trainer.stream.feeder import sampling_of
    from cua_stream.app.demo import tiny_model_dir

    shared = shared_gateway is not None
    gateway_url = shared_gateway or ""
    producer, step = producer_on_bus(file_data, bootstrap, prefix, concurrency=concurrency, turns=turns,
                                     environment=environment, gateway_port=gateway_port)  # fmt: skip
    step("the policy")
    model = model_path or tiny_model_dir()
    logs = state_dir() / "eval-logs"
    if shared:
        producer = msgspec.structs.replace(producer, gateway_url=gateway_url)
        out.print(f"    run {of_run}'s versions, as its engine serves them")
        step(f"evaluating on run {of_run}'s engine, through its gateway {gateway_url} (nothing started)")
        stack: AbstractContextManager[Any] = nullcontext()
    else:
        out.print(f"    {model}")
        step(f"starting the engine and the gateway (logs in {logs})")
        stack = engine_and_gateway(model, producer.bus, engine_port=engine_port, gateway_port=gateway_port,
                                   logs=logs)  # fmt: skip
    ev = Evaluation(plan=plan, producer=producer, sampling=sampling_of(temperature, max_new_tokens))
    ctx = Evaluating(
        ev=ev, label=str(model), success_at=success_at, out=out_file or state_dir() / "eval" / run
    )
    with stack:
        step(evaluating_line(plan, concurrency, turns, f" per version of run {of_run} (every {every})"))
        urls = None if shared else (f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gateway_port}")
        if anyio.run(follow_versions, ctx, run, of_run, every, until_version, urls, metrics_port):
            out.print("interrupted: the engine and gateway stop")
            return True
    return False


async def follow_versions(
    ctx: Evaluating, run: str, of_run: str, every: int, until: int, urls: tuple[str, str] | None,
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
        tg.start_soon(stop_on_signal, stop, "eval follow")

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
    ctx: Evaluating, run: str, of_run: str, every: int, until: int, urls: tuple[str, str] | None,
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
            metrics.reported(await evaluate_once(ctx, version_run(run, version.version), version))
            if urls is None:
                served = await served_versions(bus, version_run(run, version.version))
                out.print(f"    served by the run's engine at version(s) {', '.join(f'v{v}' for v in served)}"
                          + ("" if served == [version.version] else " (the run moved on meanwhile)"))  # fmt: skip
            done.add(version.version)


async def served_versions(bus: BusConfig, run: str) -> list[int]:
    """The weight versions the engine served an evaluation's calls at (its turns say)."""
    from cua_stream.bus.reader import scan
    from cua_stream.topics import TURNS

    return sorted({d.event.policy_version async for d in scan(bus, TURNS) if d.event.run_id == run})
