"""Running the reference engine: load the model, build the app, serve it with uvicorn."""

from __future__ import annotations

import uvicorn

from cua_stream.engine.app import create_app
from cua_stream.engine.config import EngineConfig
from cua_stream.engine.runner import ModelRunner


def build_server(config: EngineConfig) -> uvicorn.Server:
    """A uvicorn server over a loaded model (loading takes a few seconds; serving starts at ``run``)."""
    runner = ModelRunner(config.model_path, weight_version=config.weight_version, seed=config.seed)
    app = create_app(config, runner)
    return uvicorn.Server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level, lifespan="off")
    )


def run(config: EngineConfig) -> None:
    build_server(config).run()
