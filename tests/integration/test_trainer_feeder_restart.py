"""A trainer killed while it issued a group's work requests left only the first of them on the work topic
(found by the chaos run: the group then never completed and was never decided). On restart the trainer
issues the missing ones, copies of their siblings, each exactly once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from consumers.trainer.stream.feeder import work_for_group
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.topics import WORK
from tests.conftest import wait_until
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.anyio]

RUN = "feed-restart"


class CountingClock:
    """The wall clock, counting its readings. A trainer round with nothing arriving and nothing to issue
    reads it once (to time groups out, after the round's feeding), so readings count its loop's rounds:
    waiting for rounds, not seconds, for anything issued twice to be on the topic."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return time.time()


async def test_a_group_cut_short_by_a_crash_is_completed_on_restart_and_nothing_is_issued_twice(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    sampling = {"temperature": 1.0, "max_new_tokens": 8}
    first = work_for_group(RUN, 0, tasks=["t"], group_size=3, policy_version=0, sampling=sampling, now=12.5)
    async with EventProducer(bus_config) as producer:
        await producer.publish(WORK, first[0])  # the previous trainer died after its first request
    config = TrainerConfig(
        run_id=RUN, model_path=str(tiny_model_dir), tasks=["t"], group_size=3, groups_per_step=1,
        max_staleness=0, checkpoint_dir=str(tmp_path / "ckpt"), blob_dir=str(tmp_path / "blobs"),
        bus=bus_config,
    )  # fmt: skip
    stop = anyio.Event()
    clock = CountingClock()

    async def issued() -> list:
        return [d.event async for d in scan(bus_config, WORK) if d.event.run_id == RUN]

    async def all_three() -> bool:
        return len(await issued()) >= 3

    async def until_complete() -> None:
        await wait_until(all_three, poll_s=0.2)
        seen = clock.readings

        async def two_more_rounds() -> bool:  # each issues what it would (and awaits it) first
            return clock.readings >= seen + 3

        await wait_until(two_more_rounds, poll_s=0.05)
        stop.set()

    with anyio.fail_after(180):
        async with anyio.create_task_group() as tg:
            tg.start_soon(until_complete)
            await Trainer(config, clock=clock).run(stop=stop)
    work = await issued()
    assert Counter(w.episode_id for w in work) == {f"{RUN}-g000000-e{i}": 1 for i in range(3)}
    assert {(w.group_id, w.task.name, w.policy_version, w.created_at, w.group_size) for w in work} == {
        (f"{RUN}-g000000", "t", 0, 12.5, 3)
    }
    assert sorted(w.sample_index for w in work) == [0, 1, 2]  # and group 1 waits: one group in flight


async def test_the_work_a_trainer_issues_samples_with_its_filters(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    run = "feed-filters"
    config = TrainerConfig(
        run_id=run, model_path=str(tiny_model_dir), tasks=["t"], group_size=2, groups_per_step=1,
        max_staleness=0, temperature=0.7, max_new_tokens=64, top_k=20, min_p=0.05,
        checkpoint_dir=str(tmp_path / "ckpt"), blob_dir=str(tmp_path / "blobs"), bus=bus_config,
    )  # fmt: skip
    stop = anyio.Event()

    async def issued() -> list:
        return [d.event async for d in scan(bus_config, WORK) if d.event.run_id == run]

    async def both() -> bool:
        return len(await issued()) >= 2

    async def until_issued() -> None:
        await wait_until(both, poll_s=0.2)
        stop.set()

    with anyio.fail_after(180):
        async with anyio.create_task_group() as tg:
            tg.start_soon(until_issued)
            await Trainer(config).run(stop=stop)
    assert [w.sampling for w in await issued()] == [
        {"temperature": 0.7, "max_new_tokens": 64, "top_k": 20, "min_p": 0.05}
    ] * 2
