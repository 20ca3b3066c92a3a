"""`cua-stream gateway`: the session gateway (token-in/token-out) in front of an engine."""

from __future__ import annotations

import sys
from typing import Annotated

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, make_bus
from cua_stream.cli.defaults import field_option


@friendly_errors
def gateway(
    model_path: Annotated[
        str | None,
        field_option(
            "gateway", "model_path", help="Directory of the served model's processor and tokenizer."
        ),
    ] = None,
    engine_url: Annotated[
        str | None,
        field_option("gateway", "engine_url", help="Engine base URL (SGLang or cua-stream engine)."),
    ] = None,
    host: Annotated[str | None, field_option("gateway", "host", help="Listen address.")] = None,
    port: Annotated[int | None, field_option("gateway", "port", help="Listen port.")] = None,
    blob_dir: Annotated[
        str | None,
        field_option("gateway", "blob_dir", help="Screenshot blob store: a directory or s3://bucket/prefix."),
    ] = None,
    max_new_tokens_cap: Annotated[
        int | None,
        field_option("gateway", "max_new_tokens_cap", help="Most completion tokens one call may ask for."),
    ] = None,
    session_idle_timeout: Annotated[
        float | None,
        field_option("gateway", "session_idle_timeout_s", help="Expire a session idle this many seconds."),
    ] = None,
    teacher_url: Annotated[
        str | None,
        field_option(
            "gateway",
            "teacher_url",
            help="Base URL of teachers for forced-completion sessions (record-oracle).",
        ),
    ] = None,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Serve per-episode sessions with an OpenAI chat-completions endpoint; record every call to Kafka
    (the "gateway" section of --config; the API key comes from the file or CUA_GATEWAY_API_KEY).

    Example: cua-stream gateway --model-path models/tiny --engine-url http://127.0.0.1:30000"""
    from cua_stream.config import build
    from cua_stream.gateway.config import GatewayConfig

    file_data = load_file(config)
    cfg = build(
        GatewayConfig,
        file_data=file_data,
        overrides={
            "model_path": model_path,
            "engine_url": engine_url,
            "host": host,
            "port": port,
            "blob_dir": blob_dir,
            "max_new_tokens_cap": max_new_tokens_cap,
            "session_idle_timeout_s": session_idle_timeout,
            "teacher_url": teacher_url,
        },
    )
    bus = make_bus(bootstrap, prefix, config)
    from cua_stream.gateway.server import build_server

    server = build_server(cfg, bus)
    print(f"gateway ready on http://{cfg.host}:{cfg.port} -> {cfg.engine_url}", file=sys.stderr, flush=True)
    server.run()
