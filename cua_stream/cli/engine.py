"""`cua-stream engine`: the CPU reference engine (SGLang's native API over a transformers Qwen3-VL)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cua_stream.cli.common import ConfigFile, friendly_errors, load_file
from cua_stream.cli.defaults import field_option


@friendly_errors
def engine(
    model_path: Annotated[str | None, typer.Argument(help="Saved Qwen3-VL model directory.")] = None,
    host: Annotated[str | None, field_option("engine", "host", help="Listen address.")] = None,
    port: Annotated[int | None, field_option("engine", "port", help="Listen port.")] = None,
    weight_version: Annotated[
        str | None, field_option("engine", "weight_version", help="Version label of the weights at start.")
    ] = None,
    seed: Annotated[
        int | None, field_option("engine", "seed", help="Base of per-request sampling seeds.")
    ] = None,
    max_running_requests: Annotated[
        int | None,
        field_option(
            "engine", "max_running_requests", help="Requests decoded side by side; later ones queue."
        ),
    ] = None,
    debug_history: Annotated[
        int | None,
        field_option("engine", "debug_history", help="Keep the last N requests at GET /debug/requests."),
    ] = None,
    config: ConfigFile = None,
) -> None:
    """Serve /generate, /update_weights_from_disk, /pause_generation, /continue_generation, /health and
    /get_model_info over a transformers model (the "engine" section of --config).

    Example: cua-stream engine models/tiny --port 30000"""
    from cua_stream.config import build
    from cua_stream.engine.config import EngineConfig

    cfg = build(
        EngineConfig,
        file_data=load_file(config),
        overrides={
            "model_path": model_path,
            "host": host,
            "port": port,
            "weight_version": weight_version,
            "seed": seed,
            "max_running_requests": max_running_requests,
            "debug_history": debug_history,
        },
    )
    from cua_stream.engine.server import build_server

    server = build_server(cfg)
    print(f"engine ready: {cfg.model_path} on http://{cfg.host}:{cfg.port}", file=sys.stderr, flush=True)
    server.run()
