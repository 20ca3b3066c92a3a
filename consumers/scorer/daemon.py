"""The scorer daemon: ScoreTransform inside the bus's exactly-once loop, with metrics and a clean stop.

Run exactly one instance per ``transactional_id``. A restarted instance with the same id fences its
predecessor (the broker aborts whatever transaction the old one left open), and the same id doubles as
the consumer's static group membership, so a restart after kill -9 takes the partitions over at once
instead of waiting for the dead member's session to time out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus

from consumers.scorer.config import ScorerConfig
from consumers.scorer.transform import ScorerMetrics, ScoreTransform
from cua_stream.bus.lag import ConsumerLag
from cua_stream.bus.reader import scan
from cua_stream.bus.transaction import TransactionalProcessor
from cua_stream.lifecycle import Notify, freeze_startup_heap, stop_on_signal
from cua_stream.metrics import serve_metrics
from cua_stream.topics import OUTCOMES, SCORES

log = logging.getLogger(__name__)


class Scorer:
    """One scorer instance: its transform, processor and metrics (``run`` it once)."""

    def __init__(self, config: ScorerConfig) -> None:
        self.config = config
        self.metrics = ScorerMetrics()
        self.transform = ScoreTransform(
            lambda: scan(config.bus, SCORES),
            choice=config.choice,
            metrics=self.metrics,
            partitions=config.bus.episode_partitions,
        )
        self.processor = TransactionalProcessor(
            config.bus,
            source=OUTCOMES,
            group_id=config.group,
            transactional_id=config.instance,
            transform=self.transform,
            max_batch=config.max_batch,
            consumer_options={"group_instance_id": config.instance},
            outputs=(SCORES,),
        )
        self.metrics_port: int | None = None
        """The bound metrics port once ``run`` has started serving it."""
        r = self.metrics.registry
        self._stats = {
            "consumed": r.counter(
                "cua_scorer_outcomes_consumed_total", "Outcome records committed as consumed."
            ),
            "dead_lettered": r.counter(
                "cua_scorer_dead_letters_total", "Undecodable outcomes dead-lettered."
            ),
            "transactions": r.counter("cua_scorer_transactions_total", "Kafka transactions committed."),
            "aborts": r.counter("cua_scorer_aborts_total", "Kafka transactions aborted (then retried)."),
        }
        self.lag = ConsumerLag(r)
        """Its lag behind the outcome partitions it is assigned (sampled while the page is served)."""

    def render_metrics(self) -> str:
        """Prometheus text of this instance's metrics."""
        for field, counter in self._stats.items():
            counter.inc(getattr(self.processor.stats, field) - counter.value())
        return self.metrics.registry.render()

    async def run(
        self,
        *,
        stop: anyio.Event | None = None,
        stop_after: int | None = None,
        task_status: TaskStatus[int | None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Score until cancelled or ``stop`` is set; ready (with the metrics port, if any) once assigned."""
        async with anyio.create_task_group() as tg:
            if self.config.metrics_port is not None:
                self.metrics_port = await tg.start(
                    serve_metrics, self.render_metrics, self.config.metrics_host, self.config.metrics_port
                )
                tg.start_soon(self.lag.watch, lambda: getattr(self.processor, "consumer", None))
            ready = Notify(lambda: task_status.started(self.metrics_port))
            await self.processor.run(stop=stop, stop_after=stop_after, task_status=ready)
            tg.cancel_scope.cancel()  # the metrics server goes with the processor


async def serve(
    config: ScorerConfig, *, on_ready: Callable[[int | None], object] = lambda port: None
) -> None:
    """The process entry: SIGTERM or SIGINT commits the batch in hand, then the scorer exits cleanly
    (a second signal, once the first is handled, kills it the default way)."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, stop, "scorer")
        scorer = Scorer(config)

        def ready() -> None:
            freeze_startup_heap()
            on_ready(scorer.metrics_port)

        await scorer.run(stop=stop, task_status=Notify(ready))
        tg.cancel_scope.cancel()
