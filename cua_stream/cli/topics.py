"""`cua-stream topics create|describe`: the registry's topics on the broker."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.table import Table

from cua_stream.bus.acl import acls
from cua_stream.bus.admin import TopicAdmin
from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, make_bus

app = typer.Typer(
    help="Create and describe the topics of the registry (idempotent).\n\nExample: cua-stream topics create"
)
out = Console(highlight=False)


@app.command()
@friendly_errors
def create(
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
    with_acls: Annotated[
        bool,
        typer.Option(
            "--acls",
            help="Also grant every role its ACLs for the prefix (a secured broker; connect as its admin), "
            "as `cua-stream acl apply` does.",
        ),
    ] = False,
) -> None:
    """Create every registry topic that does not exist yet.

    Example: cua-stream topics create --prefix cua"""
    bus = make_bus(bootstrap, prefix, config)

    async def go() -> tuple[list[str], int]:
        async with TopicAdmin(bus) as admin:
            created = await admin.create()
            return created, await admin.create_acls(acls(bus.topic_prefix)) if with_acls else 0

    created, granted = anyio.run(go)
    out.print(f"created {len(created)} topic(s){': ' + ', '.join(created) if created else ' (all existed)'}")
    if with_acls:
        out.print(f"granted {granted} ACL(s) for prefix {bus.topic_prefix!r}")


@app.command()
@friendly_errors
def describe(bootstrap: Bootstrap = None, prefix: Prefix = None, config: ConfigFile = None) -> None:
    """Show each topic's partitions, cleanup policy and retention, and any drift from the registry.

    Example: cua-stream topics describe --prefix cua"""
    bus = make_bus(bootstrap, prefix, config)
    topics = bus.topics()

    async def go():  # -> list[TopicState]
        async with TopicAdmin(bus) as admin:
            return await admin.describe()

    table = Table("topic", "partitions", "cleanup", "retention.ms", "key", "value types", "status")
    drifted = False
    for st in anyio.run(go):
        drift = st.drift(topics.partitions_of(st.spec), topics.configs_of(st.spec))
        drifted |= bool(drift)
        table.add_row(
            st.name,
            str(st.partitions) if st.exists else "-",
            st.configs.get("cleanup.policy", "-"),
            st.configs.get("retention.ms", "-"),
            st.spec.key,
            ", ".join(t.__name__ for t in st.spec.value_types),
            "ok" if not drift else "; ".join(drift),
        )
    out.print(table)
    if drifted:
        raise typer.Exit(1)
