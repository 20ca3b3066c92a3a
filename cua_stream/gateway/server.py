"""Running the gateway daemon: renderer and blob store at build time; the Kafka producer and the engine
client inside the server's event loop (app lifespan), flushed and closed on shutdown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import uvicorn
from fastapi import FastAPI

from cua_stream.blobs import open_blob_store
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig, Secret, state_dir
from cua_stream.gateway.app import create_app
from cua_stream.gateway.config import GatewayConfig
from cua_stream.gateway.engine_client import EngineClient
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from cua_stream.gateway.teacher import HttpTeacher
from cua_stream.metrics import LoopLag


def context_length_of(model_path: str) -> int:
    """The served model's context length (``max_position_embeddings`` of its text config)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    text = getattr(config, "text_config", config)
    return int(text.max_position_embeddings)


def build_app(config: GatewayConfig, bus: BusConfig) -> FastAPI:
    template = Path(config.template_path).read_text() if config.template_path else None
    renderer = Renderer.from_pretrained(config.model_path, template_source=template)
    blobs = open_blob_store(config.blob_dir or state_dir() / "blobs")
    context_length = config.context_length or context_length_of(config.model_path)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = EngineClient(
            config.engine_url, timeout_s=config.engine_timeout_s, api_key=config.engine_api_key
        )
        teacher = HttpTeacher(config.teacher_url) if config.teacher_url else None
        try:
            async with EventProducer(bus) as producer, anyio.create_task_group() as tg:
                gateway = Gateway(
                    renderer=renderer,
                    engine=engine,
                    sink=producer,
                    blobs=blobs,
                    drain_hold_s=config.drain_hold_s,
                    max_new_tokens_cap=config.max_new_tokens_cap,
                    context_length=context_length,
                    session_idle_timeout_s=config.session_idle_timeout_s,
                    max_sessions=config.max_sessions,
                    teacher=teacher,
                    engine_max_in_flight=config.engine_max_in_flight or None,
                )
                app.state.gateway = gateway
                app.state.loop_lag = LoopLag()
                tg.start_soon(app.state.loop_lag.run)
                tg.start_soon(gateway.table.expire_idle_forever)
                yield
                tg.cancel_scope.cancel()
        finally:
            await engine.aclose()
            if teacher is not None:
                await teacher.aclose()

    def reveal(key: Secret | None) -> str | None:
        return key.reveal() if key is not None else None

    return create_app(
        api_key=reveal(config.api_key), admin_api_key=reveal(config.admin_api_key), lifespan=lifespan
    )


def build_server(config: GatewayConfig, bus: BusConfig) -> uvicorn.Server:
    app = build_app(config, bus)
    return uvicorn.Server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level, lifespan="on")
    )
