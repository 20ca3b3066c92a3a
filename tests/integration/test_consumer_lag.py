"""Consumer lag against a real Apache Kafka broker: records published and not yet read are the lag,
partition by partition (as many as a reader then reads from each), falling as they are read, for the
trainer's kind of reader (no group) and the producers' (a group); and the scorer daemon's metrics page
carries its lag behind the outcome partitions."""

from __future__ import annotations

import re
from collections import Counter

import anyio
import httpx
import pytest

from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from cua_stream.bus.consumer import EventConsumer
from cua_stream.bus.follow import Follower
from cua_stream.bus.lag import NAME, ConsumerLag
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import OutcomeEvent
from cua_stream.metrics import Registry
from cua_stream.topics import OUTCOMES
from tests.conftest import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def outcome(i: int) -> OutcomeEvent:
    return OutcomeEvent(run_id="lag", group_id=f"g{i}", episode_id=f"ep-{i:03d}", task="t", policy_version=0,
                        agent_started=True, rewards={"reward": 1.0}, started_at=1.0, finished_at=2.0)  # fmt: skip


async def publish(bus: BusConfig, numbers: range) -> None:
    async with EventProducer(bus) as producer:
        for i in numbers:
            await producer.publish(OUTCOMES, outcome(i))


async def test_records_not_yet_read_are_the_lag_and_reading_them_brings_it_to_zero(
    bus_config: BusConfig,
) -> None:
    await publish(bus_config, range(9))
    topic = bus_config.topics().name_of(OUTCOMES)
    lag = ConsumerLag(Registry())
    async with Follower(bus_config, [OUTCOMES]) as reader:  # as the trainer reads: no group, from the start
        before = await lag.sample(reader.consumer)
        read: Counter[tuple[str, int]] = Counter()
        with anyio.fail_after(30):
            while sum(read.values()) < 9:
                read.update((m.topic, m.partition) for m in await reader.poll(0.5))
        assert sum(before.values()) == 9 and before == dict(read)  # per partition: what was then read
        assert set(before) == {(topic, 0), (topic, 1)}
        assert await lag.sample(reader.consumer) == {(topic, 0): 0, (topic, 1): 0}
        await publish(bus_config, range(9, 13))
        assert sum((await lag.sample(reader.consumer)).values()) == 4
    # as a producer reads its work: a group member, lag from the group's start, down as it commits
    async with EventProducer(bus_config) as dead_letters:
        member = EventConsumer(bus_config, [OUTCOMES], group_id="lag-g", dead_letters=dead_letters)
        async with member:
            seen = 0
            with anyio.fail_after(60):
                async for batch in member.batches(timeout_ms=200):
                    if not seen:
                        # the first batch is handed out: 13 less it, still to be handed out
                        assert sum((await lag.sample(member.kafka)).values()) == 13 - len(batch)
                    seen += len(batch)
                    for delivery in batch:
                        member.processed(delivery)
                    await member.commit()
                    if seen == 13:
                        break
            assert await lag.sample(member.kafka) == {(topic, 0): 0, (topic, 1): 0}


async def test_the_scorer_serves_its_lag_behind_the_outcome_partitions(bus_config: BusConfig) -> None:
    await publish(bus_config, range(6))
    scorer = Scorer(ScorerConfig(bus=bus_config, metrics_port=0))
    stop = anyio.Event()
    topic = bus_config.topics().name_of(OUTCOMES)
    lines: dict[str, float] = {}

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            port = await tg.start(lambda task_status: scorer.run(stop=stop, task_status=task_status))

            async def lag_served() -> bool:  # sampled every few seconds: once both partitions are read
                nonlocal lines
                async with httpx.AsyncClient() as http:
                    page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                lines = {m[1]: float(m[2]) for m in re.finditer(rf"^{NAME}{{(.*)}} (\S+)$", page, re.M)}
                return scorer.processor.stats.consumed == 6 and len(lines) == 2 and sum(lines.values()) == 0

            await wait_until(lag_served, poll_s=0.5)
            stop.set()
    assert set(lines) == {f'topic="{topic}",partition="{p}"' for p in (0, 1)}
