"""`cua-stream scorer`: score outcomes into the score topic, exactly once per episode."""

from __future__ import annotations

import functools
import sys
from typing import Annotated

import typer

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, set_log_level
from cua_stream.cli.defaults import field_option


@friendly_errors
def scorer(
    group_id: Annotated[
        str | None, field_option("scorer", "group_id", help="Consumer group (unset: <prefix>.scorer).")
    ] = None,
    transactional_id: Annotated[
        str | None,
        field_option(
            "scorer",
            "transactional_id",
            help="Instance id, unique per live scorer (unset: <prefix>.scorer-0).",
        ),
    ] = None,
    reward_key: Annotated[
        str | None, field_option("scorer", "reward_key", help="Verifier reward key.")
    ] = None,
    combine: Annotated[
        str | None,
        field_option("scorer", "combine", help="Several reward keys: reject | mean | min | max | sum."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        field_option("scorer", "metrics_port", help="Serve Prometheus text on this port (0: any free port)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Consume outcomes (read_committed), produce scores and commit offsets in one Kafka transaction.
    SIGTERM commits the batch in hand and exits.

    Example: cua-stream scorer --config run.toml"""
    import anyio

    from consumers.scorer.config import scorer_config
    from consumers.scorer.daemon import serve

    set_log_level(log_level)
    cfg = scorer_config(
        load_file(config),
        overrides={
            "group_id": group_id,
            "transactional_id": transactional_id,
            "reward_key": reward_key,
            "combine": combine,
            "metrics_port": metrics_port,
        },
        bus_overrides={"bootstrap_servers": bootstrap, "topic_prefix": prefix},
    )

    def ready(port: int | None) -> None:
        where = f", metrics on :{port}/metrics" if port is not None else ""
        print(f"scorer ready: {cfg.group} as {cfg.instance}{where}", file=sys.stderr, flush=True)

    anyio.run(functools.partial(serve, cfg, on_ready=ready))
