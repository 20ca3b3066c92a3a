"""`cua-stream inspect step` on the whole loop's steps: the trainer issues work, scripted episodes run
through the real gateway and reference engine (tiny Qwen3-VL, real screenshots), the scorer scores them,
the trainer trains two steps and loads each one's weights on the engine. From the topics alone, each step
is rebuilt into exactly the samples the trainer's backend was given (tokens, masks, logprobs, images,
advantages), and the output decodes them with the model's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from consumers.trainer.config import TrainerConfig
from cua_stream.bus.reader import scan
from cua_stream.cli.inspect import app
from cua_stream.config import BusConfig
from cua_stream.engine.config import EngineConfig
from cua_stream.events import TrainStep
from cua_stream.gateway.config import GatewayConfig
from cua_stream.topics import TRAIN_STEPS
from producers.config import ProducerConfig
from producers.daemon import Producer
from tests.conftest import free_port
from tests.integration.gateway_servers import serving, tiny_model_dir
from tests.integration.test_inspect_step import RecordingTrainer, rebuilt_items, trained_items

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]

RUN = "inspect-loop"


async def two_steps(bus: BusConfig, model: Path, home: Path) -> tuple[list[TrainStep], RecordingTrainer]:
    from cua_stream.engine.server import build_server as engine_server
    from cua_stream.gateway.server import build_server as gateway_server

    engine = EngineConfig(model_path=str(model), port=free_port())
    gateway = GatewayConfig(
        model_path=str(model),
        engine_url=f"http://127.0.0.1:{engine.port}",
        port=free_port(),
        blob_dir=str(home / "blobs"),
    )
    gateway_url = f"http://127.0.0.1:{gateway.port}"
    config = TrainerConfig(
        run_id=RUN, model_path=str(model), tasks=["open-settings", "click-submit"], group_size=2,
        groups_per_step=1, max_staleness=2, max_steps=2, max_new_tokens=3, lr=1e-3,
        checkpoint_dir=str(home / "ckpt"), blob_dir=gateway.blob_dir, engine_url=gateway.engine_url,
        gateway_url=gateway_url, bus=bus,
    )  # fmt: skip
    trainer = RecordingTrainer(config)
    with serving(engine_server(engine)), serving(gateway_server(gateway, bus)), anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            await tg.start(Scorer(ScorerConfig(bus=bus)).run)
            producer = ProducerConfig(
                gateway_url=gateway_url, environment="scripted", max_turns=2, concurrency=4, bus=bus
            )
            await tg.start(Producer(producer).run)
            await trainer.run()
            tg.cancel_scope.cancel()
    steps = [d.event async for d in scan(bus, TRAIN_STEPS) if isinstance(d.event, TrainStep)]
    return sorted(steps, key=lambda s: s.step), trainer


def test_each_step_of_the_loop_is_rebuilt_from_the_topics(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    steps, trainer = anyio.run(two_steps, bus_config, tiny_model_dir, tmp_path)
    assert [s.step for s in steps] == [1, 2] and len(trainer.trained) == 2
    where = ["--bootstrap", bus_config.bootstrap_servers, "--prefix", bus_config.topic_prefix]
    runner = CliRunner()
    for step, items in zip(steps, trainer.trained, strict=True):
        args = ["step", "--run", RUN, "--step", str(step.step), "--model", str(tiny_model_dir), *where]
        done = runner.invoke(app, [*args, "--json"])
        assert done.exit_code == 0, done.output
        document = json.loads(done.stdout)
        assert document["matches"], document["mismatches"]
        assert document["rebuilt"]["group_ids"] == list(step.group_ids)
        assert (document["rebuilt"]["n_episodes"], document["rebuilt"]["n_samples"]) == (
            step.n_episodes,
            step.n_samples,
        )
        assert document["rebuilt"]["trained_tokens"] == step.metrics["trained_tokens"]
        assert rebuilt_items(document) == trained_items(items)
        assert any(s["images"] for _, s in _samples(document))  # the screenshots, by hash
        texts = [seg["text"] for _, s in _samples(document) for seg in s["segments"]]
        assert any("<|im_start|>" in t for t in texts)  # decoded with the model's tokenizer
        done = runner.invoke(app, args)
        assert done.exit_code == 0 and f"OK: the rebuilt batch is the one step {step.step}" in done.stdout
        print(done.stdout)  # shown with -s: what a person sees


def _samples(document: dict) -> list[tuple[dict, dict]]:
    return [(e, s) for g in document["groups"] for e in g["episodes"] for s in e["samples"]]
