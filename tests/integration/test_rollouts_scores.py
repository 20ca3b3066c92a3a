"""``run_episodes``' wait for scores on the real broker: it follows the scores topic from positions, each
record read once (before, it read the whole topic again every 2 s, so a long evaluation re-decoded every
score it had already taken), and finds the same scores a full read of the topic does."""

from __future__ import annotations

import anyio
import pytest

from cua_stream.app.rollouts import _scores_of, _take_scores
from cua_stream.bus.follow import Follower
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import Reward, ScoreEvent, TaskRef, WorkRequest
from cua_stream.topics import SCORES

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def score(episode: int, value: float) -> ScoreEvent:
    return ScoreEvent(run_id="r", group_id=f"g{episode % 2}", episode_id=f"e{episode}",
                      verdict=Reward(value=value), policy_version=0, scored_at=0.0)  # fmt: skip


def work(episode: int) -> WorkRequest:
    return WorkRequest(run_id="r", group_id=f"g{episode % 2}", episode_id=f"e{episode}",
                       task=TaskRef(name="click-button"), sample_index=0, group_size=1,
                       policy_version=0, created_at=0.0)  # fmt: skip


async def publish(bus: BusConfig, scores: list[ScoreEvent]) -> None:
    async with EventProducer(bus) as producer:
        for s in scores:
            await producer.publish(SCORES, s)


async def take_all(scores: Follower, wanted: set[str], found: dict[str, ScoreEvent], expected: int) -> int:
    """Poll until ``expected`` records were read (bounded); how many were read in all."""
    read = 0
    with anyio.fail_after(30):
        while read < expected:
            read += await _take_scores(scores, wanted, found, timeout_s=0.5)
    read += await _take_scores(scores, wanted, found, timeout_s=0.5)  # nothing more arrives
    return read


@pytest.mark.timeout(120)
async def test_a_second_poll_reads_only_the_records_written_since(bus_config: BusConfig) -> None:
    wanted = {"e0", "e1", "e2", "e3", "e4"}  # e5 is another run's episode: read, not taken
    await publish(bus_config, [score(0, 1.0), score(1, 0.0), score(5, 1.0)])
    found: dict[str, ScoreEvent] = {}
    async with Follower(bus_config, [SCORES]) as scores:
        assert await take_all(scores, wanted, found, expected=3) == 3
        assert sorted(found) == ["e0", "e1"]
        await publish(bus_config, [score(2, 1.0), score(3, 0.0)])
        assert await take_all(scores, wanted, found, expected=2) == 2  # not 5: the first three not again
    assert sorted(found) == ["e0", "e1", "e2", "e3"]
    assert found["e3"].verdict == Reward(value=0.0)


@pytest.mark.timeout(120)
async def test_the_scores_found_are_those_a_full_read_of_the_topic_finds(bus_config: BusConfig) -> None:
    published = [score(i, float(i % 2)) for i in range(6)]
    await publish(bus_config, published)
    asked = [work(i) for i in (0, 2, 3, 5)]
    got = await _scores_of(bus_config, asked)
    full = {d.event.episode_id: d.event async for d in scan(bus_config, SCORES)}
    assert got == {e: full[e] for e in ("e0", "e2", "e3", "e5")}
    assert got["e5"] == published[5]
