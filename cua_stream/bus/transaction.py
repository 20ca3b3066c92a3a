"""Exactly-once consume → transform → produce: the commit protocol, written once.

Each poll is processed as one Kafka transaction:

1. Poll a batch from the source topic (``read_committed``: aborted or open transactions are invisible).
2. Begin a transaction on the transactional producer.
3. For each record, in offset order: decode it; an undecodable record becomes a DeadLetter inside the
   same transaction; a good one goes through ``transform.apply``, whose outputs are sent in the
   transaction. A record that makes ``apply`` raise is dead-lettered in the transaction too (reason
   ``transform_error``, unless the error's row in ``errors.POLICY`` says retry or crash): one bad record
   never stops the stage.
4. Add the batch's next offsets to the transaction for the consumer group (``send_offsets_to_transaction``).
5. Commit. Outputs and consumed offsets become visible together, or not at all.

If any step fails the transaction is aborted, the consumer seeks back to the group's committed offsets,
and ``transform.restore`` rebuilds the transform's state from the log, so the retry sees exactly what a
fresh process would. Kafka and network failures are retried with backoff (``max_consecutive_aborts``
times in a row, then the process exits to be restarted); a failure the policy table says to crash on
exits at once. The same rewind + restore runs in the loop before the first record of every new
assignment is applied (not in the rebalance callback, which aiokafka may still be running when the
first records of the new partitions are polled, and whose exceptions it swallows). A crash (even kill -9) at any point has the same effect on restart: the broker
aborts the open transaction when the same ``transactional_id`` re-registers (fencing the old producer).

Run one processor per ``transactional_id``. aiokafka does not implement KIP-447, so scaling out means
one instance (and one transactional id) per set of source partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from anyio.abc import TaskStatus

from cua_stream.bus.codec import Delivery, OutRecord, encode_record
from cua_stream.bus.connect import backoff_s
from cua_stream.bus.consumer import (
    DeadLetterRouter,
    decode_message,
    handler_action,
    loop_action,
    make_kafka_consumer,
    require_topics,
    start_consumer,
    stop_consumer,
    transform_failure,
)
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.errors import Action, RecordError
from cua_stream.events import Event
from cua_stream.topics import DLQ, TopicSpec

log = logging.getLogger(__name__)

TXN_RETRY_BACKOFF_MS = 5
"""The transactional producer's retry backoff. Back-to-back transactions race the broker: the offset
commit of the next transaction can arrive before the previous one's markers are written, and the broker
answers it with a retriable coordinator error. aiokafka waits ``retry_backoff_ms`` (100 by default) and
looks the coordinator up again, which put 100–200 ms on the p99 of outcome → score read
(``bench/event_path.py``: p99 285 ms at 100, 108 ms at 10, 54 ms at 5, the same run's other settings)."""


def shorten_first_add_backoff(backoff_ms: int = TXN_RETRY_BACKOFF_MS) -> None:
    """Make aiokafka retry a transaction's first AddPartitionsToTxn after ``backoff_ms`` too.

    A transaction begun right after the previous commit finds that commit's markers not yet written; the
    broker answers its first AddPartitionsToTxn with CONCURRENT_TRANSACTIONS, and aiokafka retries it
    after a fixed 20 ms (``aiokafka.producer.sender.BACKOFF_OVERRIDE``), whatever
    ``retry_backoff_ms`` says. Back to back, as in any backlog, that is every transaction after the first,
    often twice: ~40 ms asleep per batch of 200 outcomes (``bench/event_path.py``: 23 such retries in 11
    back-to-back transactions). Only ever lowers the module's value (it is shared by every producer in the
    process, and only shortens a retry wait); raises at once if an aiokafka upgrade moved it, rather than
    silently losing the fix.
    """
    from aiokafka.producer import sender  # the module whose constant it is, not a public API

    if not isinstance(getattr(sender, "BACKOFF_OVERRIDE", None), float | int):
        raise RuntimeError(
            "aiokafka.producer.sender.BACKOFF_OVERRIDE is gone: recheck the transactional backoff"
        )
    sender.BACKOFF_OVERRIDE = min(sender.BACKOFF_OVERRIDE, backoff_ms / 1000)


class Transform(Protocol):
    """The pure part of a transactional stage, plus the hook that rebuilds its state."""

    def apply(self, delivery: Delivery) -> Sequence[tuple[TopicSpec, Event]]:
        """Outputs for one input record. May update in-memory state (rolled back by ``restore``)."""
        ...

    async def restore(self, partitions: frozenset[int]) -> None:
        """Rebuild state for the given source partitions from committed data (assignment, abort)."""
        ...


@runtime_checkable
class CommitAware(Protocol):
    """Optional extra of a Transform: told after each commit, so it can publish what ``apply`` staged
    (e.g. metrics) only once it is durable. Detected with ``isinstance``."""

    def committed(self) -> None: ...


@dataclass
class TransactionStats:
    consumed: int = 0
    produced: int = 0
    dead_lettered: int = 0
    transactions: int = 0
    aborts: int = 0
    by_output_topic: dict[str, int] = field(default_factory=dict)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, proc: TransactionalProcessor) -> None:
        self.proc = proc

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        pass  # nothing to flush: every batch is committed (or aborted) before the next poll

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        # Nothing here: the processing loop restores (see ``_restore_if_reassigned``). aiokafka updates the
        # assignment before it awaits this callback, so a poll can hand out records of the new partitions
        # while the callback still runs, and it logs and swallows whatever the callback raises.
        pass


class TransactionalProcessor:
    def __init__(
        self,
        config: BusConfig,
        *,
        source: TopicSpec,
        group_id: str,
        transactional_id: str,
        transform: Transform,
        max_batch: int = 200,
        max_consecutive_aborts: int = 5,
        consumer_options: Mapping[str, Any] | None = None,
        outputs: Sequence[TopicSpec] = (),
    ) -> None:
        self.config = config
        self.topics = config.topics()
        self.source_name = self.topics.name_of(source)
        self.source = source
        self.outputs = (*outputs, DLQ)
        """Topics ``transform`` writes to (checked to exist at start; the DLQ always)."""
        self.group_id = group_id
        self.transform = transform
        self.max_consecutive_aborts = max_consecutive_aborts
        # The Kafka clients are made in ``run`` (inside the event loop that runs them, and never left
        # unclosed by a process that fails before it gets there).
        self._consumer_options = {"max_poll_records": max_batch, **(consumer_options or {})}
        self.transactional_id = transactional_id
        self.consumer: AIOKafkaConsumer
        self.producer: EventProducer
        self.stats = TransactionStats()
        self.assigned = anyio.Event()
        self._restored_for: frozenset[TopicPartition] | None = None

    async def run(
        self,
        *,
        stop_after: int | None = None,
        stop: anyio.Event | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Process until cancelled, until ``stop`` is set (the batch in hand is committed first: the
        graceful way out), or until ``stop_after`` records were consumed; ready once assigned."""
        shorten_first_add_backoff()
        self.producer = EventProducer(
            self.config,
            transactional_id=self.transactional_id,
            linger_ms=0,
            retry_backoff_ms=TXN_RETRY_BACKOFF_MS,
        )
        async with self.producer:
            self.consumer = make_kafka_consumer(self.config, group_id=self.group_id, **self._consumer_options)
            await start_consumer(self.consumer, self.config)
            try:
                await require_topics(self.consumer, self.topics, (self.source, *self.outputs))
                self.consumer.subscribe([self.source_name], listener=_Listener(self))
                started = False
                aborts_in_a_row = 0
                while (stop_after is None or self.stats.consumed < stop_after) and not (
                    stop is not None and stop.is_set()
                ):
                    # step 1; short polls until ready: the assignment arrives while a poll waits
                    polled = await self.consumer.getmany(timeout_ms=500 if started else 50)
                    try:
                        if await self._restore_if_reassigned():
                            if not started:  # ready now, not after the next poll's wait
                                task_status.started()
                                started = True
                            continue  # what was polled is fetched again from the committed offsets
                    except Exception as e:
                        aborts_in_a_row += 1
                        if (
                            loop_action(e) is not Action.RETRY
                            or aborts_in_a_row >= self.max_consecutive_aborts
                        ):
                            raise
                        log.warning("state restore failed (%s); retrying", e)
                        await anyio.sleep(backoff_s(aborts_in_a_row))
                        continue
                    if not started and self.assigned.is_set():
                        task_status.started()
                        started = True
                    if not polled:
                        continue
                    try:
                        await self._transact(polled)
                        aborts_in_a_row = 0
                    except Exception as e:
                        aborts_in_a_row += 1
                        self.stats.aborts += 1
                        if (
                            loop_action(e) is not Action.RETRY
                            or aborts_in_a_row >= self.max_consecutive_aborts
                        ):
                            raise
                        log.warning("transaction aborted (%s); rewinding to committed offsets", e)
                        self._restored_for = None  # the next poll rewinds and restores first
                        await anyio.sleep(backoff_s(aborts_in_a_row))
            finally:
                await stop_consumer(self.consumer)

    async def _transact(self, polled: dict[TopicPartition, list]) -> None:
        kafka = self.producer.kafka
        router = DeadLetterRouter(self.producer)
        outputs: list[OutRecord] = []
        offsets: dict[TopicPartition, int] = {}
        dead = 0
        dlq = self.topics.name_of(DLQ)
        for tp, msgs in polled.items():
            for msg in msgs:
                try:
                    delivery = decode_message({self.source_name: self.source}, msg)
                except RecordError as e:
                    outputs.append(encode_record(dlq, DLQ, router.letter(e, msg)))
                    dead += 1
                else:
                    try:
                        produced = self.transform.apply(delivery)
                    except Exception as e:
                        if handler_action(e) is not Action.DEAD_LETTER:
                            raise
                        log.error(
                            "dead-lettering %s[%d]@%d: apply raised %r", tp.topic, tp.partition, msg.offset, e
                        )
                        outputs.append(encode_record(dlq, DLQ, router.letter(transform_failure(e), msg)))
                        dead += 1
                    else:
                        for spec, event in produced:
                            outputs.append(encode_record(self.topics.name_of(spec), spec, event))
                offsets[tp] = msg.offset + 1
        async with kafka.transaction():  # steps 2 and 5 (commit on exit, abort on exception)
            futures = [await self.producer.send_record(rec) for rec in outputs]  # step 3
            await kafka.send_offsets_to_transaction(offsets, self.group_id)  # step 4
        for fut in futures:
            fut.result()  # committed: every send succeeded; surface any error the future holds
        if isinstance(self.transform, CommitAware):
            self.transform.committed()
        self.stats.transactions += 1
        self.stats.consumed += sum(len(m) for m in polled.values())
        self.stats.dead_lettered += dead
        self.stats.produced += len(outputs) - dead
        for rec in outputs:
            self.stats.by_output_topic[rec.topic] = self.stats.by_output_topic.get(rec.topic, 0) + 1

    async def _restore_if_reassigned(self) -> bool:
        """Before the first record of a new assignment is applied: rewind to the committed offsets and
        restore the transform for it. True when it did (the poll in hand predates the restore)."""
        assignment = frozenset(self.consumer.assignment())
        if assignment == self._restored_for or not assignment:
            return False
        await self._rewind()
        self.assigned.set()
        return True

    async def _rewind(self) -> None:
        self._restored_for = None  # until restore succeeds, the next poll restores again
        assignment = frozenset(self.consumer.assignment())
        never_committed = []
        for tp in assignment:
            committed = await self.consumer.committed(tp)
            if committed is None:
                never_committed.append(tp)
            else:
                self.consumer.seek(tp, committed)
        if never_committed:
            # Their first offsets asked directly, then a plain seek: ``seek_to_beginning`` would wait for the
            # fetcher's long poll (up to 500 ms) to end, per call.
            for tp, first in (await self.consumer.beginning_offsets(never_committed)).items():
                self.consumer.seek(tp, first)
        await self.transform.restore(frozenset(tp.partition for tp in assignment))
        self._restored_for = assignment
