"""`cua-stream tap`: follow topics live, one readable line per event."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import anyio
import typer
from rich.console import Console

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, make_bus
from cua_stream.tap import Filter, follow
from cua_stream.topics import ALL


@friendly_errors
def tap(
    topics: Annotated[list[str] | None, typer.Argument(help="Topics to follow (default: all).")] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--filter", "-f", help="field=value (header or event field); repeatable."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the oldest record.")
    ] = False,
    count: Annotated[int | None, typer.Option("--count", "-n", help="Stop after this many lines.")] = None,
    idle_timeout: Annotated[
        float | None, typer.Option("--idle-timeout", help="Stop after this many seconds without records.")
    ] = None,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Follow topics live: one readable line per event (``--json``: one JSON object), filtered by ``-f``.

    Example: cua-stream tap scores -f run_id=r1 --from-beginning -n 20"""
    bus = make_bus(bootstrap, prefix, config)
    registry = bus.topics()
    specs = [registry.resolve(t) for t in topics] if topics else list(ALL)
    console = Console(highlight=False, soft_wrap=True)

    def emit(line: str) -> None:
        if as_json or not sys.stdout.isatty():
            print(line, flush=True)
        else:
            console.print(line, markup=False)

    async def go() -> int:
        return await follow(
            bus,
            specs,
            emit=emit,
            where=Filter.parse(where or []),
            as_json=as_json,
            from_beginning=from_beginning,
            count=count,
            idle_timeout_s=idle_timeout,
        )

    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(go)
