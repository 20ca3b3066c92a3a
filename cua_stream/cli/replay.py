"""`cua-stream replay`: a topic range to a file, or re-published under a new run prefix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from cua_stream.bus.reader import Bound
from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, make_bus
from cua_stream.replay import replay_to_file, replay_to_prefix

out = Console(highlight=False)


@friendly_errors
def replay(
    topic: Annotated[
        str, typer.Option("--topic", "-t", help="Topic: logical (turns) or qualified (cua.turns).")
    ],
    start: Annotated[
        str | None,
        typer.Option("--from", help="Start (inclusive): offset, @epoch-ms, ISO-8601 time, or 'beginning'."),
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="End (exclusive): offset, @epoch-ms, ISO-8601 time, or 'end'.")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file: .jsonl (readable) or .msgpack.")
    ] = None,
    republish: Annotated[
        str | None, typer.Option("--republish-prefix", help="Re-publish under this new topic prefix.")
    ] = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Only these partitions.")
    ] = None,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Replay records [--from, --to) of a topic, per partition, keeping keys, headers and order.

    Example: cua-stream replay -t turns --from beginning -o turns.jsonl"""
    if (output is None) == (republish is None):
        raise ValueError("give exactly one of --out FILE or --republish-prefix PREFIX")
    if output is not None and output.suffix not in (".jsonl", ".msgpack"):
        raise ValueError(f"--out {output}: the file name must end in .jsonl or .msgpack")
    bus = make_bus(bootstrap, prefix, config)
    spec = bus.topics().resolve(topic)
    lo, hi = Bound.parse(start, default="beginning"), Bound.parse(end, default="end")
    if output is not None:
        result = anyio.run(lambda: replay_to_file(bus, spec, lo, hi, output, partitions=partition))
    else:
        result = anyio.run(lambda: replay_to_prefix(bus, spec, lo, hi, republish, partitions=partition))
    parts = ", ".join(f"p{p}: {n}" for p, n in sorted(result.per_partition.items())) or "empty range"
    out.print(f"replayed {result.records} record(s) ({parts}) to {result.destination}")
