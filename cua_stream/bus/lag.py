"""Consumer lag on a daemon's metrics page: per partition it reads, how far its position is behind the
partition's end (``cua_consumer_lag_records{topic,partition}``). A consumer that falls behind its topic
shows here before its own throughput numbers look wrong: the scorer behind the outcomes, the trainer
behind the scores, a producer behind the work.

The end is the broker's answer to a ListOffsets request in the consumer's isolation level, so for a
``read_committed`` reader it is the last stable offset (records of open transactions are not yet
readable, so not yet lag). Offsets also number transaction markers: a transactional topic's lag can be
a record or two more than the records left to read, never fewer. Sampled every few seconds, not at
scrape time (the page renders without I/O).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import ConsumerStoppedError, KafkaError

from cua_stream.metrics import Gauge, Registry

log = logging.getLogger(__name__)

NAME = "cua_consumer_lag_records"
SAMPLE_EVERY_S = 5.0
WAIT_S = 0.2
"""How often the sampler looks for a reader that is not open yet."""

Partition = tuple[str, int]
"""(topic name, partition number)."""


def consumer_lag(ends: Mapping[Partition, int], positions: Mapping[Partition, int]) -> dict[Partition, int]:
    """Per partition with both an end and a position: end − position, at least 0 (an end asked for
    before the reader's last fetch can be behind its position)."""
    return {part: max(0, ends[part] - pos) for part, pos in sorted(positions.items()) if part in ends}


class ConsumerLag:
    """The lag family of one daemon's registry, and the sampler that keeps it current."""

    def __init__(self, registry: Registry) -> None:
        self.gauge: Gauge = registry.gauge(
            NAME,
            "Offsets not yet read, per partition: the partition's end (last stable offset for a "
            "read_committed reader) minus this reader's position.",
            ("topic", "partition"),
        )

    async def sample(self, consumer: AIOKafkaConsumer) -> dict[Partition, int]:
        """Ask the broker for the ends of the consumer's assigned partitions; set (and return) the lag.
        Partitions no longer assigned leave the page."""
        assigned = sorted(consumer.assignment())
        ends = await consumer.end_offsets(assigned) if assigned else {}
        positions = {(tp.topic, tp.partition): await consumer.position(tp) for tp in assigned}
        lag = consumer_lag({(tp.topic, tp.partition): end for tp, end in ends.items()}, positions)
        self.gauge.replace({(topic, str(partition)): float(n) for (topic, partition), n in lag.items()})
        return lag

    async def watch(
        self, consumer: Callable[[], AIOKafkaConsumer | None], every_s: float = SAMPLE_EVERY_S
    ) -> None:
        """Sample ``consumer()`` every ``every_s`` until cancelled; while it is None (the reader not yet
        open) look again every ``WAIT_S``, so the first lag shows as soon as the reader reads. A sample
        that fails (a rebalance, a broker away) leaves the last values and is tried again next time: the
        lag is for reading, never a reason for the daemon to stop."""
        failing = False
        while True:
            current = consumer()
            if current is None:
                await anyio.sleep(min(WAIT_S, every_s))
                continue
            try:
                await self.sample(current)
                failing = False
            except (KafkaError, ConsumerStoppedError) as e:
                if not failing:
                    log.info("consumer lag not sampled (tried again every %g s): %r", every_s, e)
                failing = True
            await anyio.sleep(every_s)
