"""`cua-stream dashboard`: the run on a web page, live from the topics or over a replayed range."""

from __future__ import annotations

import sys
from typing import Annotated

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file
from cua_stream.cli.defaults import field_option


@friendly_errors
def dashboard(
    port: Annotated[int | None, field_option("dashboard", "port", help="Listen port.")] = None,
    host: Annotated[str | None, field_option("dashboard", "host", help="Listen address.")] = None,
    start: Annotated[
        str | None,
        field_option(
            "dashboard", "start", "--from", help="Start: offset, @epoch-ms, ISO time (unset: the beginning)."
        ),
    ] = None,
    end: Annotated[
        str | None,
        field_option("dashboard", "end", "--to", help="End of a replayed range (unset: follow live)."),
    ] = None,
    blob_dir: Annotated[
        str | None, field_option("dashboard", "blob_dir", help="The gateway's blob store (screenshots).")
    ] = None,
    model_path: Annotated[
        str | None,
        field_option("dashboard", "model_path", help="Model dir: its tokenizer shows actions as text."),
    ] = None,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Serve a web page fed live from the topics (server-sent events): reward per step, verdicts and
    drops by reason, staleness, throughput, call latency, logprob gap and grad norm, and each recent
    episode's calls in order with their screenshots, actions and verdict. --from/--to replay a range.

    Example: cua-stream dashboard --model-path models/tiny"""
    import anyio
    import uvicorn

    from consumers.dashboard.config import dashboard_config
    from consumers.dashboard.server import build_app, check_source, served
    from consumers.trainer.inspect.step import StepRules
    from cua_stream.config import build

    cfg = dashboard_config(
        load_file(config),
        overrides={"port": port, "host": host, "start": start, "end": end, "blob_dir": blob_dir,
                   "model_path": model_path},
        bus_overrides={"bootstrap_servers": bootstrap, "topic_prefix": prefix},
    )  # fmt: skip
    partitions = anyio.run(check_source, cfg)  # an unreachable broker or missing topics: one line, exit 2
    print(f"dashboard on http://{cfg.host}:{cfg.port}/ ({partitions} partitions of {cfg.bus.topic_prefix}.*)",
          file=sys.stderr)  # fmt: skip
    rules = build(StepRules, "trainer", file_data=load_file(config))  # what `inspect step` rebuilds with
    uvicorn.Server(served(cfg, build_app(cfg, rules=rules))).run()
