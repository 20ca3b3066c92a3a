"""`cua-stream broker start|stop|status|lock`: the local single-node Kafka (KRaft) broker."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.cli.common import ConfigFile, friendly_errors, load_file
from cua_stream.cli.defaults import field_option
from cua_stream.config import build

app = typer.Typer(
    help="Run a local single-node Apache Kafka broker (KRaft) from Maven Central jars.\n\n"
    "Example: cua-stream broker start"
)
out = Console(highlight=False)

Home = Annotated[str | None, typer.Option("--home", help="State directory (env CUA_BROKER_HOME).")]
Port = Annotated[
    int | None, field_option("broker", "port", "--port", help="Client port (env CUA_BROKER_PORT).")
]


def _broker(home: str | None, port: int | None, config_file: Path | None, **extra: Any) -> LocalBroker:
    overrides = {"home": home, "port": port, **extra}
    return LocalBroker(build(BrokerConfig, file_data=load_file(config_file), overrides=overrides))


@app.command()
@friendly_errors
def start(
    home: Home = None,
    port: Port = None,
    config: ConfigFile = None,
    fresh: Annotated[bool, typer.Option(help="Wipe the broker's data first.")] = False,
    secure: Annotated[
        bool | None,
        typer.Option(
            "--secure",
            help="SASL_SSL (SCRAM-SHA-512 over TLS) on the client port, the ACL authorizer, and one user "
            "per role (admin, trainer, producer, gateway, scorer, reader) whose password is written to "
            "<home>/secrets/<role>.password (0600); the CA clients trust is <home>/tls/ca.pem. Grant the "
            "roles their ACLs with `cua-stream acl apply --broker-home <home>` once topics exist "
            "(env CUA_BROKER_SECURE).",
        ),
    ] = None,
) -> None:
    """Start the broker (download jars on first use) and wait until it accepts requests.

    Example: cua-stream broker start --port 9092 --fresh"""
    broker = _broker(home, port, config, secure=secure)
    status = broker.start(fresh=fresh)
    out.print(status.describe())
    if status.secure:
        out.print(
            "A client runs as a role with these settings (env, or the [bus] section), e.g. the trainer:"
        )
        for field, value in broker.client_bus("trainer").items():
            out.print(f"  CUA_{field.upper()}={value}", soft_wrap=True)  # whole lines, to copy


@app.command()
@friendly_errors
def stop(home: Home = None, port: Port = None, config: ConfigFile = None) -> None:
    """Stop the broker cleanly.

    Example: cua-stream broker stop"""
    out.print(_broker(home, port, config).stop().describe())


@app.command()
@friendly_errors
def status(home: Home = None, port: Port = None, config: ConfigFile = None) -> None:
    """Say whether the broker runs, where, and where its log is. Exit code 1 when stopped.

    Example: cua-stream broker status"""
    st = _broker(home, port, config).status()
    out.print(st.describe())
    if not st.running:
        raise typer.Exit(1)


@app.command()
@friendly_errors
def lock(
    kafka_version: Annotated[str, typer.Option(help="Kafka version to resolve.")],
    output: Annotated[
        Path | None, typer.Option(help="Where to write the lock (default: next to the others).")
    ] = None,
) -> None:
    """Resolve a Kafka version's jars with Maven and write their pinned lock file.

    Example: cua-stream broker lock --kafka-version 4.1.1"""
    from cua_stream.broker.jars import lock_path, write_lock

    out.print(f"wrote {write_lock(kafka_version, output or lock_path(kafka_version))}")
