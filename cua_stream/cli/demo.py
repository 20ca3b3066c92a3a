"""`cua-stream demo`: the embedded local demo (the README's main job).

Today it brings up the local broker, creates the topics and follows them with the tap; each daemon that
lands joins it (the scorer, the gateway and engine, producers and the trainer)."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer
from rich.console import Console

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.admin import TopicAdmin
from cua_stream.cli._common import ConfigFile, friendly_errors, load_file
from cua_stream.config import BusConfig, build
from cua_stream.tap import follow
from cua_stream.topics import ALL

out = Console(highlight=False)


@friendly_errors
def demo(
    seconds: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (default: Ctrl-C).")
    ] = None,
    keep_broker: Annotated[bool, typer.Option(help="Leave the broker running afterwards.")] = True,
    config: ConfigFile = None,
) -> None:
    """Start the local broker, create the topics, and tap every topic live."""
    file_data = load_file(config)
    broker = LocalBroker(build(BrokerConfig, "broker", file_data=file_data))
    out.print("[bold]1/3[/bold] starting the local Kafka broker (first run downloads ~45 MB of jars)...")
    out.print("    " + broker.start().describe())
    bus = build(
        BusConfig,
        "bus",
        file_data=file_data,
        overrides={"bootstrap_servers": broker.config.bootstrap_servers},
    )

    async def go() -> None:
        async with TopicAdmin(bus) as admin:
            created = await admin.create()
        out.print(
            f"[bold]2/3[/bold] topics under '{bus.topic_prefix}.': {len(created)} created, the rest existed"
        )
        out.print("[bold]3/3[/bold] tapping every topic (Ctrl-C to stop):")
        with anyio.move_on_after(seconds if seconds is not None else float("inf")):
            await follow(bus, list(ALL), emit=lambda line: out.print("    " + line, markup=False))

    try:
        anyio.run(go)
    except KeyboardInterrupt:
        pass
    finally:
        if not keep_broker:
            broker.stop()
