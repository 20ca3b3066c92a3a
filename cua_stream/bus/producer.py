"""The async event producer: idempotent, acks=all, batching, flushed on shutdown."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from cua_stream.bus.codec import OutRecord, encode_record
from cua_stream.bus.connect import client_security, start_client
from cua_stream.config import BusConfig
from cua_stream.events import Event
from cua_stream.topics import Topics, TopicSpec, partition_of

SHUTDOWN_FLUSH_S = 30.0


class EventSink(Protocol):
    """Where a component publishes events. ``publish`` returns once the record is durable."""

    async def publish(self, spec: TopicSpec, event: Event) -> None: ...


class EventProducer:
    """Publishes events to their topics. Use as ``async with EventProducer(cfg) as producer``.

    Idempotence plus acks=all means a retried send never duplicates or reorders a partition's records.
    ``send`` enqueues into the current batch and returns the delivery future; ``publish`` waits for it.
    """

    def __init__(
        self,
        config: BusConfig,
        *,
        transactional_id: str | None = None,
        linger_ms: int = 5,
        max_batch_size: int = 512 * 1024,
        max_request_size: int = 8 * 1024 * 1024,
        **kafka_options: Any,
    ) -> None:
        self.config = config
        self.topics: Topics = config.topics()
        self._kafka = AIOKafkaProducer(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            enable_idempotence=True,
            acks="all",
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            max_request_size=max_request_size,
            transactional_id=transactional_id,
            **client_security(config),
            **kafka_options,
        )

    @property
    def kafka(self) -> AIOKafkaProducer:
        """The underlying aiokafka producer (transactions use it directly)."""
        return self._kafka

    async def __aenter__(self) -> EventProducer:
        await start_client(self._kafka.start, self.config, self._kafka.stop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        # Flush what is batched even when we are being cancelled, but never hang shutdown forever.
        with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_FLUSH_S):
            await self._kafka.stop()

    def record(self, spec: TopicSpec, event: Event) -> OutRecord:
        return encode_record(self.topics.name_of(spec), spec, event)

    async def send(self, spec: TopicSpec, event: Event) -> asyncio.Future[RecordMetadata]:
        """Enqueue ``event`` on its topic; await the returned future for the broker's ack."""
        return await self.send_record(self.record(spec, event))

    async def send_record(
        self, rec: OutRecord, partition: int | None = None
    ) -> asyncio.Future[RecordMetadata]:
        """Enqueue ``rec``. A record of an episode topic goes to its group's partition by our own
        ``partition_of`` (not the client library's partitioner), unless ``partition`` is given."""
        if partition is None and rec.key is not None and self._co_partitioned(rec.topic):
            partition = partition_of(rec.key, len(await self._kafka.partitions_for(rec.topic)))
        return await self._kafka.send(
            rec.topic, rec.value, key=rec.key, headers=rec.headers, partition=partition
        )

    def _co_partitioned(self, topic: str) -> bool:
        spec = self.topics.spec_of_qualified(topic)
        return spec is not None and spec.key == "group_id"

    async def publish(self, spec: TopicSpec, event: Event) -> None:
        """Send and wait until the record is durable (acks=all)."""
        await (await self.send(spec, event))

    async def flush(self) -> None:
        await self._kafka.flush()
