"""The rollout producer daemon: work requests in, one published outcome per run of each, commits after.

- A consumer group on its lane's work topic (every producer of a deployment's lane in one group shares
  the work; training's lane reads the work topic, evaluation's the eval_work topic).
  At most ``concurrency`` episodes are in hand; while full, fetching pauses but polling goes on (the
  member keeps its partitions).
- Each request is admitted (``admission``: a task outside the task roots, or work too stale → a
  ``not_run:task_not_allowed`` or ``not_run:stale`` outcome, nothing run) or run:
  a new attempt number, a gateway session (URL + per-episode key), the runner (a Harbor trial on the
  local desktop, or the scripted environment), the session closed for its counts, the outcome published.
- A request's offset is committed only once its outcome is durably published, and never past a request
  still in hand (``ledger``): a crash re-delivers exactly the requests without a published outcome.
- One episode's failure is its outcome, never the daemon's: an exception of the runner is recorded.
- SIGTERM: no new work; episodes in hand finish (up to ``drain_timeout_s``); a second SIGTERM, or the
  timeout, cancels them, each with an ``abandoned`` outcome (CancelledError). Work not yet started stays
  uncommitted for the next producer.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Callable

import anyio
import httpx
import msgspec
from aiokafka.errors import KafkaError
from anyio.abc import TaskStatus

from cua_stream.bus.codec import Delivery
from cua_stream.bus.connect import backoff_s
from cua_stream.bus.consumer import EventConsumer
from cua_stream.bus.producer import EventProducer
from cua_stream.events import ExceptionRecord, OutcomeEvent, Phase, WorkRequest
from cua_stream.identity import layout_seed, outcome_of
from cua_stream.lifecycle import Notify, stop_then_abandon
from cua_stream.metrics import serve_metrics
from cua_stream.topics import OUTCOMES
from producers.admission import admission, not_run_outcome
from producers.attempts import AttemptClock
from producers.config import ProducerConfig
from producers.environments import prepare_docker, reap_orphans
from producers.episode import EpisodeResult, EpisodeRun, EpisodeRunner
from producers.http_pool import ClientPool
from producers.ledger import OffsetLedger
from producers.metrics import ProducerMetrics
from producers.outcome import exception_from
from producers.policy import PolicyWatch
from producers.sessions import GatewaySessions

log = logging.getLogger(__name__)

PUBLISH_ATTEMPTS = 30
"""About four and a half minutes of backoff (``backoff_s``) before an outcome's publish gives up."""


SCRIPTED_IMPORTS = ("litellm", "harbor.llms.base")
TRIAL_IMPORTS = ("litellm", "harbor.trial.trial", "harbor.models.trial.config", "harbor.models.task.task")
"""What each runner imports on its first episode: imported in a worker thread before the producer takes
work, since importing LiteLLM or Harbor inside the event loop stalls it for seconds (every episode in hand
and the consumer's heartbeats wait; measured: a 4.3 s loop lag at the first episode)."""


def warm_imports(environment: str) -> None:
    for name in SCRIPTED_IMPORTS if environment == "scripted" else TRIAL_IMPORTS:
        importlib.import_module(name)


def make_runner(config: ProducerConfig) -> EpisodeRunner:
    if config.environment == "scripted":
        from producers.scripted import ScriptedRunner

        return ScriptedRunner(
            model_name=config.model_name,
            max_turns=config.max_turns,
            size=(config.desktop_width, config.desktop_height),
            action_latency_s=config.scripted_action_latency_s,
            long_fraction=config.scripted_long_fraction,
            long_factor=config.scripted_long_factor,
        )
    from producers.trial import TrialRunner

    return TrialRunner(config)


def failed_outcome(
    work: WorkRequest, attempt: int, error: ExceptionRecord, *, started: float
) -> OutcomeEvent:
    """The outcome of a run that ended without a result of its runner (cancelled, or the runner raised)."""
    return outcome_of(
        work,
        attempt,
        agent_started=error.phase is not Phase.AGENT_SETUP,
        exception=error,
        started_at=started,
        finished_at=time.time(),
    )


class Producer:
    def __init__(self, config: ProducerConfig, runner: EpisodeRunner | None = None) -> None:
        self.config = config
        self.runner = runner or make_runner(config)
        self._warm = runner is None
        self.metrics = ProducerMetrics()
        self.policy = PolicyWatch(config.bus)
        self.task_roots = config.task_root_paths()
        self.ledger = OffsetLedger()
        self.attempts = AttemptClock()
        self.in_hand: dict[str, list[Delivery]] = {}
        """Work requests taken and not yet published, by episode id (a re-delivery joins its twin)."""
        self.published = 0
        self.running = 0
        self.metrics_port: int | None = None
        self._scopes: set[anyio.CancelScope] = set()
        self._start_gate = anyio.Lock()
        self._next_start = 0.0

    async def run(
        self,
        *,
        stop: anyio.Event | None = None,
        abandon: anyio.Event | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        stop, abandon = stop or anyio.Event(), abandon or anyio.Event()
        try:
            await self._run(stop, abandon, task_status)
        finally:
            from cua_stream.desktop.namespace import stop_all

            if left := stop_all():  # a cancelled trial whose own cleanup did not run
                log.warning("stopped %d episode namespace(s) left running", left)

    async def _run(self, stop: anyio.Event, abandon: anyio.Event, task_status: TaskStatus[None]) -> None:
        cfg = self.config
        if self._warm:
            await anyio.to_thread.run_sync(warm_imports, cfg.environment)
        if cfg.environment == "docker":  # the engine answers, and a killed producer's containers go
            await anyio.to_thread.run_sync(prepare_docker)
            await anyio.to_thread.run_sync(reap_orphans)
        async with EventProducer(cfg.bus) as out:
            consumer = EventConsumer(
                cfg.bus, [cfg.work_topic], group_id=cfg.group, dead_letters=out, max_batch=cfg.concurrency
            )
            async with consumer, ClientPool(2 * cfg.concurrency) as http:  # an open and a close per episode
                consumer.on_revoke.append(lambda topic, partition: self.ledger.forget((topic, partition)))
                sessions = GatewaySessions(http, cfg.gateway_url, cfg.gateway_api_key)
                limiter = anyio.CapacityLimiter(cfg.concurrency)
                async with anyio.create_task_group() as services:
                    await services.start(self.policy.run)  # admission needs the versions so far
                    if cfg.progress:
                        from producers.progress import show_progress

                        services.start_soon(show_progress, self)
                    if cfg.metrics_port is not None:
                        self.metrics_port = await services.start(
                            serve_metrics, self.metrics.registry.render, cfg.metrics_host, cfg.metrics_port
                        )
                        services.start_soon(self.metrics.consumer_lag.watch, lambda: consumer.kafka)
                    task_status.started()
                    async with anyio.create_task_group() as episodes:

                        def play(work: WorkRequest, deliveries: list[Delivery]) -> None:
                            episodes.start_soon(self._episode, work, deliveries, out, sessions, limiter, stop)

                        await self._take_work(consumer, play, stop)
                        await self._drain(consumer, abandon)
                    self._commit_due(consumer)
                    await consumer.commit()
                    services.cancel_scope.cancel()

    async def _take_work(
        self, consumer: EventConsumer, play: Callable[[WorkRequest, list[Delivery]], None], stop: anyio.Event
    ) -> None:
        async for batch in consumer.batches(timeout_ms=200):
            for delivery in batch:
                work = delivery.event
                if not isinstance(work, WorkRequest):  # the codec admits only work requests here
                    consumer.processed(delivery)
                    continue
                if not self.config.takes(work.run_id):  # the other lane's or run's (its own group runs it)
                    self.metrics.passed_over.inc()
                    consumer.processed(delivery)
                    continue
                self.ledger.start((delivery.topic, delivery.partition), delivery.offset)
                if work.episode_id in self.in_hand:  # re-delivered while we still run it: one run
                    self.in_hand[work.episode_id].append(delivery)
                else:
                    self.in_hand[work.episode_id] = [delivery]
                    play(work, self.in_hand[work.episode_id])
            await self._commit(consumer)
            if stop.is_set():
                return
            if len(self.in_hand) >= self.config.concurrency:
                consumer.pause()
            else:
                consumer.resume()

    async def _drain(self, consumer: EventConsumer, abandon: anyio.Event) -> None:
        """Wait for the episodes in hand (up to the drain timeout, or until told to abandon them), then
        cancel what is left; each cancelled episode publishes its ``abandoned`` outcome."""
        with anyio.move_on_after(self.config.drain_timeout_s):
            while self._scopes and not abandon.is_set():
                await self._commit(consumer)
                await anyio.sleep(0.2)
        for scope in list(self._scopes):
            scope.cancel()

    async def _commit(self, consumer: EventConsumer) -> None:
        """Commit what the ledger allows; a broker hiccup only delays it (the next round commits)."""
        self._commit_due(consumer)
        try:
            await consumer.commit()
        except KafkaError as e:
            log.warning("committing work offsets failed (%s); will retry", e)

    def _commit_due(self, consumer: EventConsumer) -> None:
        for topic, partition in self.ledger.partitions():  # type: ignore[misc]
            point = self.ledger.commit_point((topic, partition))
            if point is not None:
                consumer.mark_through(topic, partition, point)

    async def _episode(
        self,
        work: WorkRequest,
        deliveries: list[Delivery],
        out: EventProducer,
        sessions: GatewaySessions,
        limiter: anyio.CapacityLimiter,
        stop: anyio.Event,
    ) -> None:
        scope = anyio.CancelScope()
        self._scopes.add(scope)  # registered at once: the drain waits for queued episodes too
        try:
            async with limiter:
                await self._paced_start()
                if stop.is_set():
                    return  # not started: left uncommitted, re-delivered to the next producer
                result = await self._play(work, sessions, scope)
            await self._publish_outcome(out, result.outcome)
            self.published += 1
            self.metrics.record(result.outcome, result.env_start_s)
            for d in deliveries:
                self.ledger.finish((d.topic, d.partition), d.offset)
        finally:
            self._scopes.discard(scope)
            self.in_hand.pop(work.episode_id, None)

    async def _publish_outcome(self, out: EventProducer, outcome: OutcomeEvent) -> None:
        """Publish durably, through a broker outage (shielded: an episode's result is never dropped on the
        floor by a shutdown); after ``PUBLISH_ATTEMPTS`` the error ends the daemon, and the request, still
        uncommitted, is run again by the next producer."""
        with anyio.CancelScope(shield=True):
            for attempt in range(1, PUBLISH_ATTEMPTS + 1):
                try:
                    await out.publish(OUTCOMES, outcome)
                    return
                except KafkaError as e:
                    if attempt == PUBLISH_ATTEMPTS:
                        raise
                    log.warning("publishing the outcome of %s failed (%s); retrying", outcome.episode_id, e)
                    await anyio.sleep(backoff_s(attempt))

    async def _paced_start(self) -> None:
        """Wait for this episode's start slot (``max_starts_per_s``; FIFO)."""
        async with self._start_gate:
            now = time.monotonic()
            slot = max(now, self._next_start)
            self._next_start = slot + 1.0 / self.config.max_starts_per_s
            await anyio.sleep(slot - now)

    async def _play(
        self, work: WorkRequest, sessions: GatewaySessions, scope: anyio.CancelScope
    ) -> EpisodeResult:
        reason = admission(
            work,
            latest_version=self.policy.version_of(work.run_id),
            max_staleness=self.config.max_staleness,
            task_roots=self.task_roots,
        )
        started = time.time()
        attempt = self.attempts.next(started)
        if reason is not None:
            self.metrics.not_run.inc(reason=reason.value)
            return EpisodeResult(not_run_outcome(work, reason, attempt=attempt, now=started))
        try:
            session = await sessions.open(work, attempt)
        except (httpx.HTTPError, KeyError, ValueError) as e:
            log.warning("episode %s: no gateway session (%s)", work.episode_id, e)
            return EpisodeResult(
                failed_outcome(work, attempt, exception_from(e, Phase.AGENT_SETUP), started=started)
            )
        result: EpisodeResult | None = None
        error: BaseException | None = None
        self.running += 1
        self.metrics.running.set(self.running)
        with scope:
            try:
                result = await self.runner.run(
                    EpisodeRun(
                        work=work,
                        attempt=attempt,
                        seed=layout_seed(work),
                        session_url=session.url,
                        session_key=session.key,
                        context_length=session.context_length,
                    )
                )
            except Exception as e:  # the runner's own failure: this episode's outcome, not the daemon's
                log.exception("episode %s attempt %d: the runner raised", work.episode_id, attempt)
                error = e
        self.running -= 1
        self.metrics.running.set(self.running)
        report = await sessions.close(session)
        if result is None:
            cause = error or asyncio.CancelledError("abandoned: the producer is shutting down")
            result = EpisodeResult(
                failed_outcome(work, attempt, exception_from(cause, Phase.AGENT), started=started)
            )
        outcome = msgspec.structs.replace(
            result.outcome,
            n_calls=int(report.get("n_calls", result.outcome.n_calls)),
            n_turns=int(report.get("n_turns", result.outcome.n_turns)),
            gateway_statuses=tuple(report.get("statuses", result.outcome.gateway_statuses)),
        )
        return EpisodeResult(outcome, result.env_start_s)


async def serve(config: ProducerConfig, *, on_ready: Callable[[Producer], None] = lambda p: None) -> None:
    """The daemon: run until SIGTERM (drain) or a second SIGTERM (abandon)."""
    producer = Producer(config)
    stop, abandon = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_then_abandon, stop, abandon, "producer")
        await producer.run(stop=stop, abandon=abandon, task_status=Notify(lambda: on_ready(producer)))
        tg.cancel_scope.cancel()
