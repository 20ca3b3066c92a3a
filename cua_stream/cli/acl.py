"""`cua-stream acl print|apply`: each role's least-privilege ACLs for a topic prefix (``bus.acl``)."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.table import Table

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.acl import acls
from cua_stream.bus.admin import TopicAdmin
from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, make_bus
from cua_stream.config import BusConfig, build, bus_config

app = typer.Typer(
    help="Show or grant each role's ACLs (least privilege) on a secured broker.\n\n"
    "Example: cua-stream acl print --prefix cua"
)
out = Console(highlight=False)

BrokerHome = Annotated[
    str | None,
    typer.Option(
        "--broker-home",
        help="A secured local broker's home: connect to it as its admin user (else the [bus] settings "
        "and CUA_* environment, which must name a super user).",
    ),
]


@app.command("print")
@friendly_errors
def print_(prefix: Prefix = None, config: ConfigFile = None) -> None:
    """The ACLs of every role for the topics under ``--prefix`` (nothing is contacted).

    Example: cua-stream acl print --prefix cua"""
    topic_prefix = prefix or build(BusConfig, file_data=load_file(config)).topic_prefix
    table = Table("principal", "resource", "name", "pattern", "operation", "permission")
    for acl in acls(topic_prefix):
        table.add_row(
            acl.principal,
            acl.resource,
            acl.name,
            acl.pattern,
            acl.operation,
            "allow" if acl.allow else "deny",
        )
    # the table whole, also into a pipe or a log (not cut to a terminal's default 80 columns)
    (out if out.is_terminal else Console(highlight=False, width=120)).print(table)


@app.command()
@friendly_errors
def apply(
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
    broker_home: BrokerHome = None,
) -> None:
    """Grant every role its ACLs for ``--prefix`` (idempotent).

    Example: cua-stream acl apply --prefix cua --config run.toml"""
    if broker_home is not None:
        broker = LocalBroker(build(BrokerConfig, overrides={"home": broker_home}))
        admin_bus = {**broker.client_bus("admin"), "bootstrap_servers": broker.status().bootstrap_servers}
        bus = bus_config({**admin_bus, "topic_prefix": prefix}, load_file(config))
    else:
        bus = make_bus(bootstrap, prefix, config)

    async def go() -> int:
        async with TopicAdmin(bus) as admin:
            return await admin.create_acls(acls(bus.topic_prefix))

    out.print(f"granted {anyio.run(go)} ACL(s) for prefix {bus.topic_prefix!r} at {bus.bootstrap_servers}")
