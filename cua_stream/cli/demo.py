"""`cua-stream demo`: the embedded local demo (the README's main job)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import anyio
import msgspec
import typer
from rich.console import Console
from rich.table import Table

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.admin import TopicAdmin
from cua_stream.cli._common import ConfigFile, friendly_errors, load_file
from cua_stream.config import BusConfig, build, state_dir
from cua_stream.tap import follow
from cua_stream.topics import ALL, SCORES

if TYPE_CHECKING:
    from cua_stream.demo import DemoPlan
    from cua_stream.events import OutcomeEvent, ScoreEvent
    from producers.config import ProducerConfig

out = Console(highlight=False)


@friendly_errors
def demo(
    groups: Annotated[int, typer.Option(help="GRPO groups to run (one bundled task each).")] = 2,
    group_size: Annotated[int, typer.Option(help="Episodes per group.")] = 2,
    turns: Annotated[int, typer.Option(help="computer-1's turn limit per episode.")] = 3,
    concurrency: Annotated[int, typer.Option(help="Episodes (desktops) at once.")] = 2,
    environment: Annotated[
        str, typer.Option(help="local-desktop (Harbor trials on this host; root) or scripted (no desktop).")
    ] = "local-desktop",
    follow_after: Annotated[
        float, typer.Option("--follow", help="Keep tapping this many seconds after the run (Ctrl-C stops).")
    ] = 0.0,
    engine_port: Annotated[int, typer.Option(help="Reference engine port.")] = 30000,
    gateway_port: Annotated[int, typer.Option(help="Session gateway port.")] = 8000,
    keep_broker: Annotated[bool, typer.Option(help="Leave the broker running afterwards.")] = True,
    config: ConfigFile = None,
) -> None:
    """Broker, topics, engine + gateway (tiny Qwen3-VL), the rollout producer (Harbor computer-1 trials on
    the local desktop, bundled tasks), the scorer and a live tap; every event prints as it lands."""
    from cua_stream.demo import DemoPlan, tiny_model_dir
    from cua_stream.procs import child
    from producers.config import producer_config

    plan = DemoPlan(groups=groups, group_size=group_size, turns=turns, concurrency=concurrency)
    file_data = load_file(config)
    trials = state_dir() / "demo-trials"
    producer_overrides = {
        "environment": environment,
        "concurrency": concurrency,
        "max_turns": turns,
        "gateway_url": f"http://127.0.0.1:{gateway_port}",
        "trials_dir": str(trials),
    }
    producer = producer_config(file_data, producer_overrides)  # a bad setting fails before anything starts
    if producer.environment == "local-desktop":
        from cua_stream.desktop.doctor import require_desktop

        require_desktop()
    broker = LocalBroker(build(BrokerConfig, "broker", file_data=file_data))
    step = _Steps(6)
    step("starting the local Kafka broker (the first run downloads ~45 MB of jars)")
    out.print("    " + broker.start().describe())
    bus = build(
        BusConfig,
        "bus",
        file_data=file_data,
        overrides={"bootstrap_servers": broker.config.bootstrap_servers},
    )
    producer = msgspec.structs.replace(producer, bus=bus)
    logs = state_dir() / "demo-logs"

    async def topics() -> None:
        async with TopicAdmin(bus) as admin:
            created = await admin.create()
        out.print(f"    topics under '{bus.topic_prefix}.': {len(created)} created, the rest existed")

    step("creating the topics")
    anyio.run(topics)
    step("building the tiny Qwen3-VL (once; cached)")
    model = tiny_model_dir()
    out.print(f"    {model}")
    engine_url, gateway_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gateway_port}"
    step(f"starting the reference engine and the session gateway (logs in {logs})")
    engine_args = ["engine", str(model), "--port", str(engine_port)]
    gateway_args = [
        "gateway",
        "--model-path",
        str(model),
        "--engine-url",
        engine_url,
        "--port",
        str(gateway_port),
    ]
    gateway_args += ["--bootstrap", bus.bootstrap_servers, "--prefix", bus.topic_prefix]
    try:
        with (
            child(engine_args, f"{engine_url}/health", logs / "engine.log"),
            child(gateway_args, f"{gateway_url}/health", logs / "gateway.log"),
        ):
            anyio.run(_run, producer, plan, follow_after, step)
    except KeyboardInterrupt:
        pass
    finally:
        if not keep_broker:
            broker.stop()


class _Steps:
    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def __call__(self, what: str) -> None:
        self.n += 1
        out.print(f"[bold]{self.n}/{self.total}[/bold] {what}")


async def _run(producer: ProducerConfig, plan: DemoPlan, follow_after: float, step: _Steps) -> None:
    from consumers.scorer.daemon import Scorer, ScorerConfig
    from cua_stream.bus.producer import EventProducer
    from cua_stream.bus.reader import scan
    from cua_stream.demo import demo_work
    from cua_stream.topics import OUTCOMES, WORK
    from producers.daemon import Producer

    bus = producer.bus
    run_id = f"demo-{time.strftime('%H%M%S')}"
    work = demo_work(run_id, plan)
    wanted = {w.episode_id for w in work}
    scorer = Scorer(ScorerConfig(bus=bus))  # aiokafka clients are built inside the running loop
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(scorer.run)
        tg.start_soon(
            lambda: follow(
                bus, list(ALL), emit=lambda line: out.print("    " + line, markup=False, soft_wrap=True)
            )
        )
        await tg.start(lambda task_status: Producer(producer).run(stop=stop, task_status=task_status))
        where = "local desktops" if producer.environment == "local-desktop" else "the scripted environment"
        step(
            f"issuing {plan.groups} group(s) x {plan.group_size} episode(s) of the bundled tasks; the producer "
            f"runs them on {where}, {plan.concurrency} at once, up to {plan.turns} turn(s) each (trials in "
            f"{producer.trials_path})"
        )
        async with EventProducer(bus) as issue:
            for w in work:
                await issue.publish(WORK, w)
        while True:
            scores = {
                d.event.episode_id: d.event async for d in scan(bus, SCORES) if d.event.episode_id in wanted
            }
            if len(scores) == len(wanted):
                break
            await anyio.sleep(1.0)
        outcomes = [d.event async for d in scan(bus, OUTCOMES) if d.event.episode_id in wanted]
        stop.set()
        await anyio.sleep(1.0)  # let the tap print the last scores
        _summary(outcomes, scores)
        if follow_after:
            await anyio.sleep(follow_after)
        tg.cancel_scope.cancel()


def _summary(outcomes: list[OutcomeEvent], scores: dict[str, ScoreEvent]) -> None:
    table = Table(
        "episode", "task", "calls", "ended by", "score", title=outcomes[0].run_id if outcomes else None
    )
    for o in sorted(outcomes, key=lambda o: o.episode_id):
        verdict = scores[o.episode_id].verdict
        shown = (
            f"discard: {verdict.reason}"
            if verdict.__struct_config__.tag == "discard"
            else f"{verdict.value:.2f} ({verdict.reason})"
        )
        end = o.exception.type if o.exception else (o.early_termination_reason or "")
        table.add_row(o.episode_id.removeprefix(f"{o.run_id}-"), o.task, str(o.n_calls), end, shown)
    out.print(table)
    out.print("A random tiny policy earns 0 on every task (the bundled tasks' oracle solves each one).")
    out.print("Replay any of it: [bold]cua-stream replay --topic turns -o turns.jsonl[/bold]; "
              "follow it live: [bold]cua-stream tap[/bold]")  # fmt: skip
