"""The local stack the one-machine commands share (``demo``, ``record-oracle``, ``learn``): a broker with
the topics; the engine and gateway (and the teacher) as child processes (logs under ``logs``), stopped
when the block ends; episodes run by an in-process producer and scorer until scored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from rich.console import Console

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.admin import TopicAdmin
from cua_stream.config import BusConfig, ConfigError, build

if TYPE_CHECKING:
    from cua_stream.procs import Child
    from producers.config import ProducerConfig

out = Console(highlight=False)


@dataclass(frozen=True)
class Serving:
    engine_url: str
    gateway_url: str


def broker_and_topics(
    file_data: dict[str, Any], step: Callable[[str], None], *, prefix: str | None = None
) -> tuple[LocalBroker, BusConfig]:
    """Start the local broker (or find it running) and create the topics (under ``prefix``, else the
    config's); the bus that reaches them."""
    broker = LocalBroker(build(BrokerConfig, file_data=file_data))
    step("starting the local Kafka broker (the first run downloads ~45 MB of jars)")
    out.print("    " + broker.start().describe())
    bus = build(
        BusConfig,
        file_data=file_data,
        overrides={"bootstrap_servers": broker.config.bootstrap_servers, "topic_prefix": prefix},
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
    engine_url: str | None = None,
    also: tuple[Child, ...] = (),
) -> Iterator[Serving]:
    """The reference engine serving ``model`` and a gateway recording to ``bus``, until the block ends,
    started side by side (with ``also``'s daemons). With ``engine_url``, an engine already serving
    ``model`` there (SGLang on a GPU host) is used instead and none is started."""
    from cua_stream.procs import children

    external = engine_url is not None
    engine_url = f"http://127.0.0.1:{engine_port}" if engine_url is None else engine_url
    gateway_url = f"http://127.0.0.1:{gateway_port}"
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
    specs: list[Child] = [*also]
    if not external:
        specs.append((engine_args, f"{engine_url}/health", logs / "engine.log"))
    specs.append((gateway_args, f"{gateway_url}/health", logs / "gateway.log"))
    with children(specs):
        yield Serving(engine_url, gateway_url)


def require_engine(url: str) -> None:
    """An external engine must answer before anything is started for it: one line naming the URL."""
    import httpx

    try:
        httpx.get(f"{url}/health", timeout=10).raise_for_status()
    except httpx.HTTPError as e:
        raise ConfigError(f"--engine-url: no engine answers {url}/health ({e}); start it first") from None


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


@contextmanager
def teacher_stack(
    model: Path, bus: BusConfig, *, engine_port: int, gateway_port: int, policies_port: int, logs: Path
) -> Iterator[Serving]:
    """The scripted-policy server (the teacher), the engine and a gateway whose sessions may use it."""
    teacher_url = f"http://127.0.0.1:{policies_port}/policies"
    policies: Child = (["policies", "--port", str(policies_port)], f"http://127.0.0.1:{policies_port}/health",
                       logs / "policies.log")  # fmt: skip
    with engine_and_gateway(model, bus, engine_port=engine_port, gateway_port=gateway_port, logs=logs,
                            gateway_extra=("--teacher-url", teacher_url), also=(policies,)) as serving:  # fmt: skip
        yield serving
