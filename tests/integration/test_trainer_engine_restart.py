"""An engine restarted from its launch weights (a crash, a rescheduled pod) serves version 0 again; the
trainer notices within its check interval and loads its current weights there, instead of letting the
engine serve the base policy until the next step (found by the chaos runs)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from consumers.trainer.weights import ENGINE_CHECK_S
from cua_stream.config import BusConfig
from cua_stream.engine.config import EngineConfig
from tests.conftest import free_port, wait_until
from tests.integration.gateway_servers import serving, tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.anyio]


async def test_a_restarted_engine_gets_the_trainers_current_weights_back(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from cua_stream.engine.server import build_server as engine_server

    caplog.set_level(logging.WARNING, logger="consumers.trainer.weights")
    checkpoints = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, checkpoints / "weights-v3")  # as after three steps
    (checkpoints / ckpt.FILE).write_bytes(
        msgspec.json.encode(ckpt.Checkpoint(run_id="restore", version=3, step=3, weights="weights-v3"))
    )
    engine = EngineConfig(model_path=str(tiny_model_dir), port=free_port())
    url = f"http://127.0.0.1:{engine.port}"
    config = TrainerConfig(
        run_id="restore", model_path=str(tiny_model_dir), checkpoint_dir=str(checkpoints),
        blob_dir=str(tmp_path / "blobs"), engine_url=url, bus=bus_config,
    )  # fmt: skip

    async def serves(version: str) -> bool:
        async with httpx.AsyncClient(timeout=10) as http:
            try:
                return (await http.get(f"{url}/get_model_info")).json()["weight_version"] == version
            except httpx.TransportError:
                return False

    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        with serving(engine_server(engine)):
            tg.start_soon(lambda: Trainer(config).run(stop=stop))
            with anyio.fail_after(120):
                await wait_until(lambda: serves("3"), poll_s=0.2)  # loaded at the trainer's start
        with serving(engine_server(engine)):  # the same engine, restarted: its launch weights again
            with anyio.fail_after(ENGINE_CHECK_S + 60):  # a hang guard: the check runs every ENGINE_CHECK_S
                await wait_until(lambda: serves("3"), poll_s=0.2)
            stop.set()
    # the restarted engine served its launch weights, as the trainer's check found them (asking the engine
    # here instead would race that check, which may come at any moment after the restart)
    said = [r.getMessage() for r in caplog.records]
    assert "the engine serves weights 0, not v3 (it restarted?): loading v3" in said, said
