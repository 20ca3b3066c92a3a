"""Consumer lag, the pure part: end − position per partition read, never negative, only partitions with
both known; the gauge replaced whole (a partition no longer read leaves the page); and every consuming
daemon's metrics page carries the family; the sampler's first sample as soon as the reader opens."""

from __future__ import annotations

import anyio
import pytest
from aiokafka import TopicPartition

from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from consumers.trainer.metrics import TrainerMetrics
from cua_stream.bus.lag import NAME, ConsumerLag, consumer_lag
from cua_stream.metrics import Registry
from producers.metrics import ProducerMetrics
from tests.conftest import wait_until


def test_lag_is_the_end_minus_the_position_per_partition() -> None:
    ends = {("o", 0): 10, ("o", 1): 4, ("s", 0): 7}
    positions = {("o", 0): 3, ("o", 1): 4, ("x", 0): 1}
    assert consumer_lag(ends, positions) == {("o", 0): 7, ("o", 1): 0}  # "s" not read, "x" no end


def test_an_end_older_than_the_position_is_no_lag_not_a_negative_one() -> None:
    assert consumer_lag({("o", 0): 5}, {("o", 0): 9}) == {("o", 0): 0}


def test_the_gauge_is_replaced_whole_so_a_revoked_partition_leaves_the_page() -> None:
    registry = Registry()
    lag = ConsumerLag(registry)
    lag.gauge.replace({("o", "0"): 3.0, ("o", "1"): 5.0})
    lag.gauge.replace({("o", "1"): 2.0})
    page = registry.render()
    assert f'{NAME}{{topic="o",partition="1"}} 2' in page and 'partition="0"' not in page
    with pytest.raises(ValueError, match=NAME):
        lag.gauge.replace({("o",): 1.0})


def test_the_consuming_daemons_export_the_family() -> None:
    pages = {
        "trainer": TrainerMetrics().render(),
        "scorer": Scorer(ScorerConfig()).render_metrics(),
        "producer": ProducerMetrics().registry.render(),
    }
    assert [d for d, page in pages.items() if f"# TYPE {NAME} gauge" not in page] == []


class _Reader:
    """A consumer's three calls the sampler makes (unit-test stand-in)."""

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("o", 0)}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 10 for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return 4


@pytest.mark.anyio
async def test_the_first_sample_comes_as_soon_as_the_reader_opens_not_a_period_later() -> None:
    lag = ConsumerLag(Registry())
    reader: list[_Reader] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lag.watch, lambda: reader[0] if reader else None, 3600.0)  # period: an hour
        await anyio.sleep(0.3)
        assert lag.gauge.samples() == {}  # no reader yet: nothing on the page
        reader.append(_Reader())

        async def sampled() -> bool:
            return bool(lag.gauge.samples())

        with anyio.fail_after(60):  # a minute, not the hour: it looked again while there was none
            await wait_until(sampled, poll_s=0.05)
        tg.cancel_scope.cancel()
    assert lag.gauge.samples() == {("o", "0"): 6.0}
