"""Running the gateway daemon: renderer and blob store at build time; the Kafka producer and the engine
client inside the server's event loop (app lifespan), flushed and closed on shutdown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig, state_dir
from cua_stream.gateway.app import create_app
from cua_stream.gateway.config import GatewayConfig
from cua_stream.gateway.engine_client import EngineClient
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway


def build_app(config: GatewayConfig, bus: BusConfig) -> FastAPI:
    template = Path(config.template_path).read_text() if config.template_path else None
    renderer = Renderer.from_pretrained(config.model_path, template_source=template)
    blobs = LocalBlobStore(config.blob_dir or state_dir() / "blobs")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = EngineClient(config.engine_url, timeout_s=config.engine_timeout_s)
        try:
            async with EventProducer(bus) as producer:
                app.state.gateway = Gateway(
                    renderer=renderer,
                    engine=engine,
                    sink=producer,
                    blobs=blobs,
                    drain_hold_s=config.drain_hold_s,
                )
                yield
        finally:
            await engine.aclose()

    api_key = config.api_key.reveal() if config.api_key is not None else None
    return create_app(api_key=api_key, lifespan=lifespan)


def build_server(config: GatewayConfig, bus: BusConfig) -> uvicorn.Server:
    app = build_app(config, bus)
    return uvicorn.Server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level, lifespan="on")
    )
