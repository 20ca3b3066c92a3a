"""The local stack the one-machine commands share (``demo``, ``record-oracle``): a broker with the
topics, and the engine and gateway as child processes (logs under ``logs``), stopped when the block ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.admin import TopicAdmin
from cua_stream.config import BusConfig, build

out = Console(highlight=False)


@dataclass(frozen=True)
class Serving:
    engine_url: str
    gateway_url: str
    logs: Path


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

    async def topics() -> None:
        async with TopicAdmin(bus) as admin:
            created = await admin.create()
        out.print(f"    topics under '{bus.topic_prefix}.': {len(created)} created, the rest existed")

    step("creating the topics")
    anyio.run(topics)
    return broker, bus


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
        yield Serving(engine_url, gateway_url, logs)


class Steps:
    """Numbered progress lines: ``1/5 starting ...``."""

    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def __call__(self, what: str) -> None:
        self.n += 1
        out.print(f"[bold]{self.n}/{self.total}[/bold] {what}")
