"""`cua-stream scorer`: score outcomes into the score topic, exactly once per episode."""

from __future__ import annotations

import functools
import sys
from typing import Annotated

import typer

from cua_stream.cli._common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, set_log_level


@friendly_errors
def scorer(
    group_id: Annotated[str | None, typer.Option(help="Consumer group (default <prefix>.scorer).")] = None,
    transactional_id: Annotated[
        str | None, typer.Option(help="Instance id, unique per live scorer (default <prefix>.scorer-0).")
    ] = None,
    reward_key: Annotated[str | None, typer.Option(help="Verifier reward key (default 'reward').")] = None,
    combine: Annotated[
        str | None, typer.Option(help="Several reward keys: reject | mean | min | max | sum.")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus text on this port (0: any free port).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Consume outcomes (read_committed), produce scores and commit offsets in one Kafka transaction.
    SIGTERM commits the batch in hand and exits."""
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
