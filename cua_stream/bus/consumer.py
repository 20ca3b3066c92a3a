"""Consumer-group helpers: decoded deliveries, dead-letter routing, commit only after processing.

Guarantee: at-least-once per consumer group. An offset is committed only once its record has been
handled (or dead-lettered durably), including when partitions are revoked in a rebalance; a record in
flight during a revoke is re-delivered to the partition's next owner, never skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio
import anyio.lowlevel
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata

from cua_stream.bus.codec import Delivery, dead_letter, decode_record
from cua_stream.bus.connect import AUTHORIZATION_ERRORS, backoff_s, client_security, start_client
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.errors import Action, CuaError, RecordError, TopicMissing, TransformFailed, action_for
from cua_stream.events import DeadLetter
from cua_stream.topics import DLQ, Topics, TopicSpec

log = logging.getLogger(__name__)

SHUTDOWN_S = 10.0
"""How long a consumer's shielded stop may take (leaving its group) before shutdown goes on without it."""


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop ``consumer`` even while we are being cancelled, within ``SHUTDOWN_S``. While the brokers are
    unreachable aiokafka's stop raises from its own fetch tasks (a CancelledError of a task it cancels
    itself, inside our shield, so not ours); shutdown goes on with a warning instead of a traceback."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_S):
        try:
            await consumer.stop()
        except (KafkaError, OSError, asyncio.CancelledError) as e:
            log.warning("the Kafka consumer stopped uncleanly (%s); shutdown goes on", type(e).__name__)


async def require_topics(consumer: AIOKafkaConsumer, topics: Topics, specs: Sequence[TopicSpec]) -> None:
    """TopicMissing naming the first of ``specs`` that does not exist under this prefix (a daemon at a
    wrong prefix would otherwise wait for records forever without a word)."""
    for spec in specs:
        name = topics.name_of(spec)
        if not await partitions_of(consumer, name):
            raise TopicMissing(
                f"topic {name!r} does not exist: create the topics with "
                f"`cua-stream topics create --prefix {topics.prefix}` (or check --prefix / bus.topic_prefix)"
            )


def handler_action(error: Exception) -> Action:
    """What a failure of a stage's handler on one decoded record means: cua-stream's own errors follow
    the policy table; any other exception is that record's problem (it decoded, yet the handler cannot
    take it), so it is dead-lettered as ``transform_error`` instead of crash-looping the stage."""
    return action_for(error) if isinstance(error, CuaError) else Action.DEAD_LETTER


def loop_action(error: BaseException) -> Action:
    """What a failure of the consume/produce/commit machinery means: Kafka client and network errors
    are retried with backoff (the broker may come back); cua-stream's errors follow the table; anything
    else is a bug and crashes the process (it restarts from its committed offsets). A refusal by the
    brokers' ACLs crashes too: retrying cannot grant it, and a daemon retrying it forever looks alive."""
    if isinstance(error, AUTHORIZATION_ERRORS):
        return Action.CRASH
    if isinstance(error, (KafkaError, OSError)):
        return Action.RETRY
    return action_for(error)


def transform_failure(error: Exception) -> RecordError:
    """The RecordError to dead-letter a record with, for a handler failure."""
    return error if isinstance(error, RecordError) else TransformFailed(f"{type(error).__name__}: {error}")


def make_kafka_consumer(
    config: BusConfig,
    *,
    group_id: str | None,
    from_beginning: bool = True,
    read_committed: bool = True,
    max_poll_records: int = 500,
    **kafka_options: Any,
) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=config.bootstrap_servers,
        client_id=config.client_id,
        group_id=group_id,
        enable_auto_commit=False,  # commits follow processing, never the poll
        auto_offset_reset="earliest" if from_beginning else "latest",
        isolation_level="read_committed" if read_committed else "read_uncommitted",
        max_poll_records=max_poll_records,
        request_timeout_ms=config.request_timeout_ms,
        **client_security(config),
        **kafka_options,
    )


async def start_consumer(consumer: AIOKafkaConsumer, config: BusConfig) -> None:
    await start_client(consumer.start, config, consumer.stop)
    # aiokafka 0.14 cancels a coordinator task in stop(); if that task never ran, stop() raises
    # CancelledError (and masks whatever error made us stop). One scheduler tick lets it start.
    await anyio.lowlevel.checkpoint()


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    """The partition numbers of ``topic`` (fresh metadata; empty if the topic does not exist).
    TopicAuthorizationFailedError where the brokers' ACLs hide it from this client."""
    cluster = await consumer._client.fetch_all_metadata()  # the public partitions_for_topic uses a cache
    found = sorted(cluster.partitions_for_topic(topic) or ())
    if not found and await _unauthorized(consumer, topic):
        raise TopicAuthorizationFailedError(topic)
    return found


async def _unauthorized(consumer: AIOKafkaConsumer, topic: str) -> bool:
    """Whether ``topic`` is missing from a full metadata listing because this principal may not describe
    it (such a topic is left out, as if it did not exist). Asked by name, never creating it."""
    request = MetadataRequest([topic], allow_auto_topic_creation=False)
    response = await consumer._client.send(consumer._client.get_random_node(), request)
    # every version's topic entry starts (error_code, name, ...)
    return any(t[1] == topic and t[0] == TopicAuthorizationFailedError.errno for t in response.topics)


class Located(Protocol):
    """Where a record sits and what it held: a consumed record (``ConsumerRecord``), or its ``Delivery``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Any


def letter_for(error: RecordError, record: Located) -> DeadLetter:
    """The DeadLetter of ``record``, which failed with ``error`` (it did not decode, or its handler
    refused it): the one builder, so every dead letter carries the same fields."""
    return dead_letter(
        error,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        headers=tuple(record.headers or ()),
    )


class DeadLetterRouter:
    """Turns a record that cannot be decoded or handled into a DeadLetter event on the DLQ topic, durably."""

    def __init__(self, producer: EventProducer) -> None:
        self.producer = producer
        self.count = 0

    def letter(self, error: RecordError, record: Located) -> DeadLetter:
        return letter_for(error, record)

    async def route(self, error: RecordError, record: Located) -> None:
        log.warning("dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, error)
        await self.producer.publish(DLQ, letter_for(error, record))
        self.count += 1


def decode_message(topics_by_name: dict[str, TopicSpec], msg: ConsumerRecord) -> Delivery:
    """Decode a consumed record (raises RecordError)."""
    return decode_record(
        topics_by_name[msg.topic],
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        key=msg.key,
        value=msg.value,
        headers=tuple(msg.headers or ()),
        timestamp_ms=msg.timestamp,
    )


class _CommitOnRevoke(ConsumerRebalanceListener):
    def __init__(self, owner: EventConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.owner._commit(set(revoked))
        for tp in revoked:
            self.owner._processed.pop(tp, None)
            for callback in self.owner.on_revoke:
                callback(tp.topic, tp.partition)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.owner.assigned.set()


class EventConsumer:
    """Reads events from ``specs`` as member ``group_id``. ``async with`` it, then ``run(handler)`` or
    iterate ``batches()`` and call ``processed(d)`` + ``commit()`` yourself."""

    def __init__(
        self,
        config: BusConfig,
        specs: Sequence[TopicSpec],
        *,
        group_id: str,
        dead_letters: EventProducer,
        from_beginning: bool = True,
        max_batch: int = 500,
    ) -> None:
        self.config = config
        self.topics = config.topics()
        self._by_name = {self.topics.name_of(s): s for s in specs}
        self._kafka = make_kafka_consumer(
            config, group_id=group_id, from_beginning=from_beginning, max_poll_records=max_batch
        )
        self._router = DeadLetterRouter(dead_letters)
        self._processed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self.assigned = anyio.Event()
        self.max_retries = 5
        self.on_revoke: list[Callable[[str, int], None]] = []
        """Called with (topic, partition) for each partition taken away in a rebalance."""

    @property
    def dead_lettered(self) -> int:
        return self._router.count

    @property
    def kafka(self) -> AIOKafkaConsumer:
        """The Kafka consumer underneath (for a consumer-lag sampler: read it, do not poll it)."""
        return self._kafka

    async def __aenter__(self) -> EventConsumer:
        await start_consumer(self._kafka, self.config)
        await require_topics(self._kafka, self.topics, [*self._by_name.values(), DLQ])
        self._kafka.subscribe(list(self._by_name), listener=_CommitOnRevoke(self))
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_S):
                await self._commit(None)
        except KafkaError as e:  # uncommitted records are delivered again: at-least-once
            log.warning("final commit failed (%s); the last records will be delivered again", e)
        finally:
            await stop_consumer(self._kafka)

    async def batches(self, timeout_ms: int = 500) -> AsyncIterator[list[Delivery]]:
        """Decoded records, a poll at a time. Bad records are dead-lettered here and marked processed."""
        while True:
            polled = await self._kafka.getmany(timeout_ms=timeout_ms)
            batch: list[Delivery] = []
            for msgs in polled.values():
                for msg in msgs:
                    try:
                        batch.append(decode_message(self._by_name, msg))
                    except RecordError as e:
                        await self._router.route(e, msg)
                        self._mark(TopicPartition(msg.topic, msg.partition), msg.offset)
            yield batch

    def processed(self, delivery: Delivery) -> None:
        """Mark ``delivery`` handled; its offset is committed at the next ``commit()``."""
        self._mark(TopicPartition(delivery.topic, delivery.partition), delivery.offset)

    def mark_through(self, topic: str, partition: int, next_offset: int) -> None:
        """Mark every record of ``topic[partition]`` before ``next_offset`` handled (for a caller that
        handles records out of order and knows how far the handled prefix reaches)."""
        if next_offset > 0:
            self._mark(TopicPartition(topic, partition), next_offset - 1)

    def pause(self) -> None:
        """Stop fetching (keep polling ``batches()``: the member stays in its group, heartbeats go on)."""
        self._kafka.pause(*self._kafka.assignment())

    def resume(self) -> None:
        self._kafka.resume(*self._kafka.assignment())

    def _mark(self, tp: TopicPartition, offset: int) -> None:
        if tp in self._kafka.assignment():  # a mark for a revoked partition is dropped (re-delivered)
            self._processed[tp] = max(self._processed.get(tp, 0), offset + 1)

    async def commit(self) -> None:
        await self._commit(None)

    async def _handle(self, handler: Callable[[Delivery], Awaitable[None]], delivery: Delivery) -> None:
        """``handler(delivery)`` under the policy table: retried with backoff, dead-lettered, or raised."""
        attempt = 0
        while True:
            try:
                await handler(delivery)
                return
            except Exception as e:
                action = handler_action(e)
                attempt += 1
                if action is Action.RETRY and attempt < self.max_retries:
                    log.warning("handling %s@%d failed (%s); retrying", delivery.topic, delivery.offset, e)
                    await anyio.sleep(backoff_s(attempt))
                    continue
                if action is not Action.DEAD_LETTER:
                    raise
                await self._router.route(transform_failure(e), delivery)
                return

    async def _commit(self, only: set[TopicPartition] | None) -> None:
        due = {
            tp: OffsetAndMetadata(off, "")
            for tp, off in self._processed.items()
            if (only is None or tp in only) and self._committed.get(tp) != off
        }
        if due:
            await self._kafka.commit(due)
            self._committed.update({tp: om.offset for tp, om in due.items()})

    async def run(
        self,
        handler: Callable[[Delivery], Awaitable[None]],
        *,
        commit_interval_s: float = 1.0,
        stop_after: int | None = None,
    ) -> int:
        """Handle records one by one until cancelled (or ``stop_after`` records); commit processed offsets
        every ``commit_interval_s``. Returns the number handled."""
        handled = 0
        last_commit = time.monotonic()
        async for batch in self.batches():
            for delivery in batch:
                await self._handle(handler, delivery)
                self.processed(delivery)
                handled += 1
                if stop_after is not None and handled >= stop_after:
                    await self.commit()
                    return handled
            if time.monotonic() - last_commit >= commit_interval_s:
                await self.commit()
                last_commit = time.monotonic()
        return handled  # pragma: no cover - batches() never ends
