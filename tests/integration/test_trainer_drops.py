"""Every group the trainer does not train is published with its reason and counted: a discarded episode
drops its group, a group with equal rewards is filtered, a stale one is bounded off, one whose episodes
never all finish times out; the rest train. Synthetic records through the real broker, the tiny model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
import pytest

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import Discard, GroupDropped, Reward, ScoreEvent, TrainStep
from cua_stream.topics import SCORES, TRAIN_STEPS, TURNS
from tests.conftest import wait_until
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_trainer_resume import RUN, episode_records

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.anyio]


def at_version_5(checkpoints: Path) -> Path:
    """A checkpoint directory whose trainer is at policy version 5 (as after five steps)."""
    checkpoints.mkdir()
    (checkpoints / ckpt.FILE).write_bytes(msgspec.json.encode(ckpt.Checkpoint(run_id=RUN, version=5, step=5)))
    return checkpoints


class HeldClock:
    """The trainer's clock, held still until ``move_past`` a group timeout: a group times out only once
    the test has seen every other group decided, however long this machine takes to read and train them
    (on the wall clock, a step or a slow read between a group's records could time out a whole group)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def move_past(self, timeout_s: float) -> None:
        self.now += timeout_s + 1.0


async def until(done: Callable[[], bool]) -> None:
    """Until ``done`` (the trainer's state, read in this process) holds; the caller bounds the wait."""

    async def holds() -> bool:
        return done()

    await wait_until(holds, poll_s=0.2)


async def publish(config: BusConfig) -> None:
    """Groups 0-1 train; 2 has a discard; 3 has equal rewards; 4 was sampled by v0 while the trainer is at
    v5 (its checkpoint says so); 5 is missing an episode's score (it times out)."""
    async with EventProducer(config) as producer:
        for group in range(6):
            for episode in range(2):
                turns, score = episode_records(group, episode)[:-1], episode_records(group, episode)[-1]
                for turn in turns:
                    version = 0 if group == 4 else 5
                    await producer.send(TURNS, msgspec.structs.replace(turn, policy_version=version))
                assert isinstance(score, ScoreEvent)
                if group == 2 and episode == 1:
                    score = msgspec.structs.replace(score, verdict=Discard(reason="sandbox_lost"))
                if group == 3:
                    score = msgspec.structs.replace(score, verdict=Reward(value=1.0))
                if group == 5 and episode == 1:
                    continue
                await producer.send(SCORES, score)
        await producer.flush()


async def test_each_drop_is_published_with_its_reason_and_counted(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    await publish(bus_config)
    # the trainer is at policy version 5 (as after five steps): group 4's tokens are five versions old
    checkpoints = at_version_5(tmp_path / "ckpt")
    config = TrainerConfig(
        run_id=RUN,
        model_path=str(tiny_model_dir),
        group_size=2,
        groups_per_step=2,
        max_staleness=1,
        filter_zero_variance=True,
        group_timeout_s=3.0,
        checkpoint_dir=str(checkpoints),
        blob_dir=str(tmp_path / "blobs"),
        bus=bus_config,
    )
    clock = HeldClock()
    trainer = Trainer(config, clock=clock)
    stop = anyio.Event()
    reasons = {"discarded", "zero_variance", "stale", "timeout"}
    drops = trainer.metrics.drops

    async def all_seen() -> None:
        # the step and the three drops a group's own records decide, while no time passes for the join
        await until(
            lambda: trainer.state.step == 6 and all(drops.value(reason=r) == 1 for r in reasons - {"timeout"})
        )
        assert drops.value(reason="timeout") == 0
        clock.move_past(config.group_timeout_s)  # now group 5 has waited too long for its second episode
        await until(lambda: drops.value(reason="timeout") == 1)
        stop.set()

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(all_seen)
            await trainer.run(stop=stop)
    records = [d.event async for d in scan(bus_config, TRAIN_STEPS)]
    steps = [r for r in records if isinstance(r, TrainStep)]
    drops = {r.group_id: (r.reason, r.detail) for r in records if isinstance(r, GroupDropped)}
    assert [(s.step, sorted(s.group_ids)) for s in steps] == [(6, [f"{RUN}-g000000", f"{RUN}-g000001"])]
    assert drops[f"{RUN}-g000002"] == ("discarded", "sandbox_lost")
    assert drops[f"{RUN}-g000003"][0] == "zero_variance"
    assert drops[f"{RUN}-g000004"][0] == "stale" and "v0 < v5 - 1" in drops[f"{RUN}-g000004"][1]
    assert drops[f"{RUN}-g000005"] == ("timeout", "1 of 2 episodes finished in time")
    assert len(drops) == 4  # each dropped group published once
    metrics = trainer.metrics.render()
    for reason in reasons:
        assert f'cua_trainer_groups_dropped_total{{reason="{reason}"}} 1' in metrics


async def test_under_on_stale_mask_a_groups_stale_tokens_are_masked_and_the_rest_trains(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The trainer at v5, ``max_staleness`` 1, ``on_stale = "mask"``: group 0's first turns were sampled
    by v0 (masked), its second turns by v5 (trained); group 1 is all v5; group 2 all v0 (nothing left
    to train: dropped as stale). The step trains groups 0 and 1 and records the tokens it masked."""
    async with EventProducer(bus_config) as producer:
        for group in range(3):
            for episode in range(2):
                *turns, score = episode_records(group, episode)
                for turn in turns:
                    old = group == 2 or (group == 0 and turn.seq == 0)
                    await producer.send(TURNS, msgspec.structs.replace(turn, policy_version=0 if old else 5))
                await producer.send(SCORES, score)
        await producer.flush()
    checkpoints = at_version_5(tmp_path / "ckpt")
    config = TrainerConfig(
        run_id=RUN,
        model_path=str(tiny_model_dir),
        group_size=2,
        groups_per_step=2,
        max_staleness=1,
        on_stale="mask",
        checkpoint_dir=str(checkpoints),
        blob_dir=str(tmp_path / "blobs"),
        bus=bus_config,
    )
    trainer = Trainer(config)
    stop = anyio.Event()

    async def all_seen() -> None:
        for _ in iter(int, 1):  # until the step and the drop are in
            if trainer.state.step == 6 and trainer.metrics.drops.value(reason="stale") == 1:
                stop.set()
                return
            await anyio.sleep(0.2)

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(all_seen)
            await trainer.run(stop=stop)
    records = [d.event async for d in scan(bus_config, TRAIN_STEPS)]
    (step,) = [r for r in records if isinstance(r, TrainStep)]
    drops = {r.group_id: (r.reason, r.detail) for r in records if isinstance(r, GroupDropped)}
    assert sorted(step.group_ids) == [f"{RUN}-g000000", f"{RUN}-g000001"] and step.n_episodes == 4
    # each episode: one sample of two 4-token completions; group 0's first ones masked
    assert step.metrics["masked_stale_tokens"] == 2 * 4
    assert step.metrics["trained_tokens"] == 2 * 4 + 2 * 8
    assert step.metrics.get("stale_tokens_5") is None  # no masked token counts as trained
    assert drops == {f"{RUN}-g000002": ("stale", "every trained token is stale: newest v0 < v5 - 1")}
