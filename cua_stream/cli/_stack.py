"""The local stack the one-machine commands share (``demo``, ``record-oracle``, ``learn``): a broker with
the topics; the engine and gateway (and the teacher) as child processes (logs under ``logs``), stopped
when the block ends; episodes run by an in-process producer and scorer until scored."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import typer
from anyio.abc import TaskGroup, TaskStatus
from rich.console import Console

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.admin import TopicAdmin
from cua_stream.config import BusConfig, build

if TYPE_CHECKING:
    from cua_stream.events import ScoreEvent, WorkRequest
    from producers.config import ProducerConfig

out = Console(highlight=False)
SCORED_WAIT_S = 1800.0
"""How long ``run_episodes`` waits for every episode to be scored."""
PRODUCER_STOP_S = 15.0
"""How long a stopping in-process producer gets to finish: its episodes in hand (none, once every one is
scored) and its last commits."""


@dataclass(frozen=True)
class Serving:
    engine_url: str
    gateway_url: str


def broker_and_topics(
    file_data: dict[str, Any], step: Callable[[str], None]
) -> tuple[LocalBroker, BusConfig]:
    """Start the local broker (or find it running) and create the topics; the bus that reaches them."""
    broker = LocalBroker(build(BrokerConfig, "broker", file_data=file_data))
    step("starting the local Kafka broker (the first run downloads ~45 MB of jars)")
    out.print("    " + broker.start().describe())
    bus = build(
        BusConfig,
        "bus",
        file_data=file_data,
        overrides={"bootstrap_servers": broker.config.bootstrap_servers},
    )
    step("creating the topics")
    create_topics(bus)
    return broker, bus


def create_topics(bus: BusConfig) -> None:
    """The registry's topics under the bus's prefix (those that exist are kept)."""

    async def topics() -> None:
        async with TopicAdmin(bus) as admin:
            created = await admin.create()
        out.print(f"    topics under '{bus.topic_prefix}.': {len(created)} created, the rest existed")

    anyio.run(topics)


@contextmanager
def engine_and_gateway(
    model: Path,
    bus: BusConfig,
    *,
    engine_port: int,
    gateway_port: int,
    logs: Path,
    gateway_extra: tuple[str, ...] = (),
) -> Iterator[Serving]:
    """The reference engine serving ``model`` and a gateway recording to ``bus``, until the block ends."""
    from cua_stream.procs import child

    engine_url, gateway_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gateway_port}"
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
    gateway_args += ["--bootstrap", bus.bootstrap_servers, "--prefix", bus.topic_prefix, *gateway_extra]
    with (
        child(engine_args, f"{engine_url}/health", logs / "engine.log"),
        child(gateway_args, f"{gateway_url}/health", logs / "gateway.log"),
    ):
        yield Serving(engine_url, gateway_url)


class Steps:
    """Numbered progress lines: ``1/5 starting ...``."""

    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def __call__(self, what: str) -> None:
        self.n += 1
        out.print(f"[bold]{self.n}/{self.total}[/bold] {what}")


def episode_producer(
    file_data: dict[str, Any], *, concurrency: int, turns: int, environment: str | None, gateway_port: int,
    trials: str,
) -> ProducerConfig:  # fmt: skip
    """The producer of a one-shot command (eval, record-oracle): the config file's ``[producer]`` with
    these options over it, its episodes' trials under ``state_dir() / trials``; the local desktop is
    checked before anything starts (it needs root and its packages)."""
    from cua_stream.config import state_dir
    from producers.config import producer_config

    producer = producer_config(
        file_data,
        {
            "concurrency": concurrency,
            "max_turns": turns,
            "environment": environment,
            "gateway_url": f"http://127.0.0.1:{gateway_port}",
            "trials_dir": str(state_dir() / trials),
        },
    )
    if producer.environment == "local-desktop":
        from cua_stream.desktop.doctor import require_desktop

        require_desktop()
    return producer


def parse_tasks(tasks: str) -> list[str]:
    """``--tasks``: comma-separated bundled task names, or ``all``."""
    from cua_stream.tasks import TASKS

    chosen = list(TASKS) if tasks == "all" else [t.strip() for t in tasks.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in TASKS]
    if unknown or not chosen:
        raise typer.BadParameter(f"unknown tasks {unknown}; known: {', '.join(TASKS)}", param_hint="--tasks")
    return chosen


@contextmanager
def teacher_stack(
    model: Path, bus: BusConfig, *, engine_port: int, gateway_port: int, policies_port: int, logs: Path
) -> Iterator[Serving]:
    """The scripted-policy server (the teacher), the engine and a gateway whose sessions may use it."""
    from cua_stream.procs import child

    teacher_url = f"http://127.0.0.1:{policies_port}/policies"
    with (
        child(["policies", "--port", str(policies_port)], f"http://127.0.0.1:{policies_port}/health",
              logs / "policies.log"),
        engine_and_gateway(model, bus, engine_port=engine_port, gateway_port=gateway_port, logs=logs,
                           gateway_extra=("--teacher-url", teacher_url)) as serving,
    ):  # fmt: skip
        yield serving


@dataclass
class Rollouts:
    """An in-process scorer and producer, running (``rollouts``); more tasks go in ``task_group``."""

    task_group: TaskGroup
    producer_stop: anyio.Event

    def stop_producer(self) -> None:
        """Let the producer finish the episodes in hand and stop taking work (the scorer goes on)."""
        self.producer_stop.set()


@asynccontextmanager
async def rollouts(producer: ProducerConfig) -> AsyncIterator[Rollouts]:
    """Run a scorer and a producer in this process for the block (the one wiring ``demo``, ``learn``,
    ``record-oracle`` and ``run_episodes`` share); both are stopped when it ends."""
    from consumers.scorer.config import ScorerConfig
    from consumers.scorer.daemon import Scorer
    from producers.daemon import Producer

    stop, stopped = anyio.Event(), anyio.Event()

    async def produce(task_status: TaskStatus[None]) -> None:
        try:
            await Producer(producer).run(stop=stop, task_status=task_status)
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        await tg.start(Scorer(ScorerConfig(bus=producer.bus)).run)
        await tg.start(produce)
        try:
            yield Rollouts(tg, stop)
        finally:
            stop.set()
            # the producer's last commits, before it is cancelled: an answered request left uncommitted
            # would be played again by the next producer of the group (the next run of this command)
            with anyio.CancelScope(shield=True), anyio.move_on_after(PRODUCER_STOP_S):
                await stopped.wait()
            tg.cancel_scope.cancel()


async def run_episodes(
    producer: ProducerConfig, work: list[WorkRequest], *, resume: bool = False
) -> dict[str, ScoreEvent]:
    """Run ``work`` with an in-process producer and scorer until every episode is scored (bounded).
    ``resume``: a request already on the work topic (an earlier, killed start of the same run issued it)
    is not issued again: the producers' group runs it once, or has already answered it."""
    from cua_stream.bus.producer import EventProducer
    from cua_stream.bus.reader import scan
    from cua_stream.topics import WORK

    async with rollouts(producer):
        wanted, issued = {w.episode_id for w in work}, set()
        if resume:
            issued = {
                d.event.episode_id async for d in scan(producer.bus, WORK) if d.event.episode_id in wanted
            }
        async with EventProducer(producer.bus) as publisher:
            for request in work:
                if request.episode_id not in issued:
                    await publisher.publish(WORK, request)
        return await _scores_of(producer.bus, work)


async def _scores_of(bus: BusConfig, work: list[WorkRequest]) -> dict[str, ScoreEvent]:
    """Wait (bounded) until every episode of ``work`` is scored; the scores by episode."""
    from cua_stream.bus.reader import scan
    from cua_stream.topics import SCORES

    wanted = {w.episode_id for w in work}
    found: dict[str, ScoreEvent] = {}
    with anyio.move_on_after(SCORED_WAIT_S):
        while len(found) < len(wanted):
            async for d in scan(bus, SCORES):
                if d.event.episode_id in wanted:
                    found[d.event.episode_id] = d.event
            if len(found) < len(wanted):
                await anyio.sleep(2.0)
    return found
