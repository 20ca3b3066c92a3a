"""`cua-stream producer`: run work requests as episodes, publish their outcomes."""

from __future__ import annotations

import functools
import sys
from typing import Annotated

import typer

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, set_log_level
from cua_stream.cli.defaults import field_option


@friendly_errors
def producer(
    gateway_url: Annotated[
        str | None, field_option("producer", "gateway_url", help="Session gateway URL.")
    ] = None,
    concurrency: Annotated[
        int | None, field_option("producer", "concurrency", help="Episodes at once.")
    ] = None,
    environment: Annotated[
        str | None,
        field_option(
            "producer",
            "environment",
            help="local-desktop (Harbor trials in namespaces; root), docker (Harbor's docker environment: "
            "`cua-stream containers start --build`), any other Harbor environment type, or scripted.",
        ),
    ] = None,
    group_id: Annotated[
        str | None, field_option("producer", "group_id", help="Consumer group (unset: <prefix>.producers).")
    ] = None,
    max_turns: Annotated[
        int | None, field_option("producer", "max_turns", help="computer-1's turn limit.")
    ] = None,
    max_staleness: Annotated[
        int | None,
        field_option(
            "producer", "max_staleness", help="Skip work this many policy versions behind (unset: run all)."
        ),
    ] = None,
    trials_dir: Annotated[
        str | None, field_option("producer", "trials_dir", help="Harbor trial directories.")
    ] = None,
    metrics_port: Annotated[
        int | None, field_option("producer", "metrics_port", help="Prometheus text on this port (0: any).")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Live progress table on stderr.")] = False,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Consume the work topic as a consumer group; run each request as a Harbor computer-1 trial (on the
    local desktop, in Docker, or on any Harbor environment), through a gateway session of its own; publish its outcome, then commit. SIGTERM
    drains (episodes in hand finish), a second SIGTERM abandons them (each with an outcome saying so).

    Example: cua-stream producer --gateway-url http://127.0.0.1:8000 --config run.toml"""
    import anyio

    from producers.config import producer_config
    from producers.daemon import serve

    set_log_level(log_level)
    cfg = producer_config(
        load_file(config),
        overrides={
            "gateway_url": gateway_url,
            "concurrency": concurrency,
            "environment": environment,
            "group_id": group_id,
            "max_turns": max_turns,
            "max_staleness": max_staleness,
            "trials_dir": trials_dir,
            "metrics_port": metrics_port,
            "progress": progress or None,
        },
        bus_overrides={"bootstrap_servers": bootstrap, "topic_prefix": prefix},
    )
    if cfg.environment == "local-desktop":
        from cua_stream.desktop.doctor import require_desktop

        require_desktop()

    def ready(p: object) -> None:
        port = getattr(p, "metrics_port", None)
        where = f", metrics on :{port}/metrics" if port is not None else ""
        print(
            f"producer ready: {cfg.group}, {cfg.concurrency} at once, {cfg.environment}{where}",
            file=sys.stderr,
            flush=True,
        )

    anyio.run(functools.partial(serve, cfg, on_ready=ready))
