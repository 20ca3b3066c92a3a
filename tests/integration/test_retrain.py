"""Forking a run from its log, against real steps: the trainer (tiny model, real broker) trains run RUN's
three groups in three steps, stopped after the first and resumed, keeping every version's weights.

- Its settings are on its log: one ``TrainerSettings`` record per start, saying from which step they
  trained, each the trainer's resolved section without its secrets."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest

from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from consumers.trainer.settings import public_settings
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig, Secret
from cua_stream.events import ScoreEvent, SummaryEvent, TrainerSettings, TrainStep
from cua_stream.topics import SCORES, SUMMARIES, TRAIN_STEPS, TURNS
from tests.conftest import _create_topics
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_inspect_step import RUN, episode

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]

GROUPS = 3


async def publish(bus: BusConfig) -> None:
    """Three groups of two episodes (group 0's first episode retries a call and compacts)."""
    async with EventProducer(bus) as producer:
        for group in range(GROUPS):
            for index in range(2):
                for event in episode(group, index):
                    topic = SCORES if isinstance(event, ScoreEvent) else TURNS
                    await producer.send(SUMMARIES if isinstance(event, SummaryEvent) else topic, event)
        await producer.flush()


def run_config(bus: BusConfig, model: Path, home: Path, **extra: object) -> TrainerConfig:
    return TrainerConfig(
        run_id=RUN, model_path=str(model), group_size=2, groups_per_step=1, max_staleness=1000, lr=1e-2,
        keep_versions=GROUPS, checkpoint_dir=str(home / "ckpt"), blob_dir=str(home / "blobs"), bus=bus,
        engine_api_key=Secret("sekrit-engine-key"), **extra,  # type: ignore[arg-type]
    )  # fmt: skip  # lr: each version far from the last, so a step trained from the wrong one shows


async def records(bus: BusConfig, run: str) -> tuple[list[TrainStep], list[TrainerSettings]]:
    events = [d.event async for d in scan(bus, TRAIN_STEPS) if d.event.run_id == run]
    steps = sorted((e for e in events if isinstance(e, TrainStep)), key=lambda s: s.step)
    return steps, [e for e in events if isinstance(e, TrainerSettings)]


@dataclass(frozen=True)
class Run:
    bus: BusConfig
    config: TrainerConfig
    steps: list[TrainStep]
    settings: list[TrainerSettings]
    home: Path


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    bus = BusConfig(
        bootstrap_servers=kafka_bootstrap, topic_prefix=f"t-{uuid.uuid4().hex[:10]}", episode_partitions=2
    )
    anyio.run(_create_topics, bus)
    anyio.run(publish, bus)
    home = tmp_path_factory.mktemp("run")

    async def train() -> None:
        with anyio.fail_after(300):
            await Trainer(run_config(bus, tiny_model_dir, home, max_steps=1)).run()
            await Trainer(run_config(bus, tiny_model_dir, home, max_steps=GROUPS)).run()  # resumed

    anyio.run(train)
    steps, settings = anyio.run(records, bus, RUN)
    assert [s.step for s in steps] == [1, 2, 3]
    return Run(bus, run_config(bus, tiny_model_dir, home, max_steps=GROUPS), steps, settings, home)


def test_a_run_publishes_its_settings_at_each_start_without_its_secrets(run: Run) -> None:
    assert [s.step for s in run.settings] == [0, 1]  # started, then resumed after step 1
    first, resumed = run.settings
    assert resumed.settings == public_settings(run.config) and resumed.retrain_of == ""
    assert first.settings == {**public_settings(run.config), "max_steps": 1}
    assert "engine_api_key" not in resumed.settings and "sekrit" not in msgspec.json.encode(resumed).decode()
    assert all(s.retrain_of == "" for s in run.steps)
