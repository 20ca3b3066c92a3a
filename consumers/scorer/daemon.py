"""The scorer daemon: ScoreTransform inside the bus's exactly-once loop, with metrics and a clean stop.

Run exactly one instance per ``transactional_id``. A restarted instance with the same id fences its
predecessor (the broker aborts whatever transaction the old one left open), and the same id doubles as
the consumer's static group membership, so a restart after kill -9 takes the partitions over at once
instead of waiting for the dead member's session to time out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskStatus

from consumers.scorer.table import Combine, RewardChoice
from consumers.scorer.transform import ScorerMetrics, ScoreTransform
from cua_stream.bus.reader import scan
from cua_stream.bus.transaction import TransactionalProcessor
from cua_stream.config import BusConfig, ConfigError, build, bus_config
from cua_stream.lifecycle import Notify, stop_on_signal
from cua_stream.metrics import serve_metrics
from cua_stream.topics import OUTCOMES, SCORES

log = logging.getLogger(__name__)


class ScorerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[scorer]`` section (env ``CUA_SCORER_<FIELD>``)."""

    group_id: str = ""
    """Consumer group on the outcome topic; empty: ``<topic prefix>.scorer``."""
    transactional_id: str = ""
    """This instance's transactional id (and static group member id); empty: ``<topic prefix>.scorer-0``.
    Unique per live instance: a second instance with the same id fences the first."""
    reward_key: str = "reward"
    """The verifier reward key to score with when the verifier returns it."""
    combine: Combine = "reject"
    """Several reward keys, none of them ``reward_key``: mean | min | max | sum, or reject (score 0,
    reason ``ambiguous_reward``)."""
    max_batch: int = 200
    """Outcomes per poll, and so per Kafka transaction."""
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    """Serve Prometheus text at http://<metrics_host>:<metrics_port>/metrics (0: any free port)."""
    bus: BusConfig = BusConfig()
    """Filled from the ``[bus]`` section by ``scorer_config``."""

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ConfigError("scorer.max_batch: must be >= 1")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError("scorer.metrics_port: must be 0..65535")

    @property
    def group(self) -> str:
        return self.group_id or f"{self.bus.topic_prefix}.scorer"

    @property
    def instance(self) -> str:
        return self.transactional_id or f"{self.bus.topic_prefix}.scorer-0"

    @property
    def choice(self) -> RewardChoice:
        return RewardChoice(key=self.reward_key, combine=self.combine)


def scorer_config(
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    bus_overrides: Mapping[str, Any] | None = None,
) -> ScorerConfig:
    """The ``[scorer]`` section (file < env < overrides) with the ``[bus]`` section inside it."""
    if file_data and "bus" in (file_data.get("scorer") or {}):
        raise ConfigError("scorer.bus: put bus settings in the [bus] section")
    scorer = build(ScorerConfig, "scorer", file_data=file_data, overrides=overrides)
    return msgspec.structs.replace(scorer, bus=bus_config(bus_overrides, file_data))


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
            ready = Notify(lambda: task_status.started(self.metrics_port))
            await self.processor.run(stop=stop, stop_after=stop_after, task_status=ready)
            tg.cancel_scope.cancel()  # the metrics server goes with the processor


async def run_scorer(
    config: ScorerConfig,
    *,
    stop: anyio.Event | None = None,
    task_status: TaskStatus[int | None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run a scorer until cancelled or ``stop`` is set. ``task_status`` gets the metrics port (or None)."""
    await Scorer(config).run(stop=stop, task_status=task_status)


async def serve(
    config: ScorerConfig, *, on_ready: Callable[[int | None], object] = lambda port: None
) -> None:
    """The process entry: SIGTERM or SIGINT commits the batch in hand, then the scorer exits cleanly
    (a second signal, once the first is handled, kills it the default way)."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, stop, "scorer")
        scorer = Scorer(config)
        await scorer.run(stop=stop, task_status=Notify(lambda: on_ready(scorer.metrics_port)))
        tg.cancel_scope.cancel()
