"""The trainer daemon: issue the run's work, join its episodes from the stream, train GRPO steps, publish
the weights, and checkpoint so that a kill -9 at any moment loses no group and trains none twice.

The loop, one poll at a time:

1. Feed: publish the work of the next groups while fewer than ``max_in_flight`` are undecided.
2. Join: read turns, summaries and scores (every partition, from the checkpoint's offsets) into the
   open groups (``join``); a group whose last score arrived gets its barrier.
3. Decide each ready group (``samples`` + ``grpo``): queue it for training, or drop it with a reason;
   drop the groups past their deadline.
4. Step, when the queue holds ``episodes_per_step`` episodes (whole groups): one optimizer step, then the
   step's commit (``commit``: weights saved, the checkpoint listing the step's records written, the
   weights loaded on the engine, the records — ``TrainStep``, ``PolicyVersion``, the groups dropped and
   the records dead-lettered since the last checkpoint — published).

A restart loads the checkpoint, re-loads its weights on the engine if the engine serves another version,
publishes the pending records the log does not hold yet (``commit.reconcile``), and replays the inputs
from the resume offsets: groups decided before the checkpoint are skipped, open ones are rebuilt exactly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial

import anyio
import anyio.to_thread
import httpx
from anyio.abc import TaskStatus

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.backends.megatron_vl_backend import MegatronVLBackend
from consumers.trainer.backends.torch_backend import StepStats, TorchBackend
from consumers.trainer.batch import train_items
from consumers.trainer.commit import checkpoint_of, issued_in_log, publish, reconcile
from consumers.trainer.config import TrainerConfig
from consumers.trainer.grpo.groups import (
    DropReason,
    EpisodeResult,
    GroupDecision,
    ReadyGroup,
    decide,
    drop,
    next_batch,
    recorded_batch,
)
from consumers.trainer.grpo.loss import LossStats
from consumers.trainer.grpo.lr_schedule import warmup_lr
from consumers.trainer.metrics import TrainerMetrics
from consumers.trainer.retrain.rerun import recorded_batches, start_error
from consumers.trainer.retrain.settings import settings_record
from consumers.trainer.sinks import TrainerSinks
from consumers.trainer.state import Queued, TrainerState, stale_in_queue
from consumers.trainer.step_record import describe_step, policy_version, token_staleness, train_step
from consumers.trainer.stream.feeder import work_for_group
from consumers.trainer.stream.intake import READS, Intake
from consumers.trainer.stream.join import GroupState, Join
from consumers.trainer.stream.judge import Judgement, dead_letter_for, judge
from consumers.trainer.weights import ENGINE_CHECK_S, EngineWeights
from cua_stream.blobs import open_blob_store
from cua_stream.bus.follow import Follower
from cua_stream.bus.producer import EventProducer
from cua_stream.errors import ConfigError, EngineUnreachable
from cua_stream.events import Event, GroupDropped, TrainStep
from cua_stream.identity import group_id_of, index_of
from cua_stream.metrics import serve_metrics
from cua_stream.tasks.refs import task_ref
from cua_stream.topics import TRAIN_STEPS, WORK
from cua_stream.versions import staleness

log = logging.getLogger(__name__)


class Trainer:
    def __init__(
        self,
        config: TrainerConfig,
        *,
        clock: Callable[[], float] = time.time,
        on_step: Callable[[TrainStep], object] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.on_step = on_step or _log_step
        """Called with each step's record once it is published (progress display, logs)."""
        self.sinks = TrainerSinks(config.metrics_sinks, config.run_id)
        self.topics = config.bus.topics()
        self.dir = config.checkpoints
        self.metrics = TrainerMetrics()
        self._timings: dict[str, float] = {}
        self._waiting_since = time.perf_counter()
        """When the trainer last had nothing to train (its start, or its last commit's end)."""
        self._stale_tokens: dict[int, int] = {}
        """The step in hand's trained tokens per staleness (its record carries them)."""
        self._masked_stale = 0
        """The step in hand's tokens masked past the bound (``on_stale="mask"``)."""
        self._lr = config.lr
        """The last step's learning rate (``lr_warmup_steps`` ramps it)."""
        self.state = TrainerState()
        self.recorded: dict[int, tuple[str, ...]] | None = None
        """With ``replay_batches_from``: step number → the groups the original run's step took."""
        self.source_settings: Mapping[str, object] | None = None
        """With ``retrain_of``: the settings the original run trained those steps with (None: unrecorded)."""
        self.metrics_port: int | None = None
        self._inputs: Follower | None = None
        """Its input reader while it reads (for the consumer-lag sampler)."""
        self.tasks = [task_ref(t) for t in config.tasks]
        self.engine = EngineWeights(
            config.engine_url,
            gateway_url=config.gateway_url,
            mode=config.weight_update,
            drain_timeout_s=config.drain_timeout_s,
            engine_key=config.engine_api_key,
            gateway_key=config.gateway_api_key,
        )
        """The feeder's tasks, resolved once (a task directory's path, or a bundled name)."""

    # -- start ----------------------------------------------------------------------------------------

    def _load(self) -> tuple[ckpt.Checkpoint, TorchBackend | MegatronVLBackend]:
        saved = ckpt.load(self.dir) or ckpt.Checkpoint(run_id=self.config.run_id)
        if saved.run_id != self.config.run_id:
            raise ConfigError(
                f"trainer.checkpoint_dir {self.dir} holds run {saved.run_id!r}, not {self.config.run_id!r}"
            )
        if error := start_error(self.recorded, saved.step, self.dir):
            raise ConfigError(error)
        megatron = self.config.backend == "megatron"
        backend_class = (
            partial(MegatronVLBackend, device=self.config.device, layout=self.config.layout)
            if megatron
            else TorchBackend
        )
        backend = backend_class(
            self.config.model_path,
            open_blob_store(self.config.blobs),
            temperature=self.config.temperature,
            lr=self.config.lr,
            max_grad_norm=self.config.max_grad_norm,
            passes=self.config.passes,
            loss=self.config.loss,
            weights=self.dir / saved.weights if saved.weights else None,
        )
        if (state := ckpt.optimizer_state(self.dir, saved)) is not None:
            backend.load_optimizer_state(state)
        return saved, backend

    # -- run ------------------------------------------------------------------------------------------

    async def run(
        self,
        *,
        stop: anyio.Event | None = None,
        task_status: TaskStatus[int | None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Train until ``stop`` is set or ``max_steps`` steps are done; ready once it is reading."""
        stop = stop or anyio.Event()
        if self.config.replay_batches_from:
            self.recorded, self.source_settings = await recorded_batches(self.config)
        saved, backend = await anyio.to_thread.run_sync(self._load)
        self.backend = backend
        try:
            await self._run(saved, stop, task_status)
        finally:  # the megatron backend's worker is a process of its own: ended even when cancelled
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(backend.close)

    async def _run(
        self, saved: ckpt.Checkpoint, stop: anyio.Event, task_status: TaskStatus[int | None]
    ) -> None:
        st = self.state
        st.version, st.step, st.weights = saved.version, saved.step, saved.weights
        async with anyio.create_task_group() as tg:
            if self.config.metrics_port is not None:
                self.metrics_port = await tg.start(
                    serve_metrics, self.metrics.render, self.config.metrics_host, self.config.metrics_port
                )
                tg.start_soon(
                    self.metrics.consumer_lag.watch, lambda: self._inputs.live if self._inputs else None
                )
            async with EventProducer(self.config.bus) as producer, httpx.AsyncClient(timeout=60) as http:
                # the engine may serve other weights than the checkpoint's: it restarted too
                if saved.weights and await self.engine.served(http) != str(saved.version):
                    await self.engine.push(http, self.dir / saved.weights, saved.version)
                await reconcile(self.config.bus, producer, saved.pending)
                record = settings_record(
                    self.config, step=saved.step, now=self.clock(), source=self.source_settings
                )
                await producer.publish(TRAIN_STEPS, record)  # what trains from here: each start says it
                await anyio.to_thread.run_sync(self.sinks.write_pending, saved.pending)
                st.issued = max(saved.issued, await issued_in_log(self.config, producer, set(saved.decided)))
                await self._loop(producer, http, saved, stop, task_status)
                await anyio.to_thread.run_sync(self.sinks.close)
            tg.cancel_scope.cancel()

    async def _loop(
        self,
        producer: EventProducer,
        http: httpx.AsyncClient,
        saved: ckpt.Checkpoint,
        stop: anyio.Event,
        task_status: TaskStatus[int | None],
    ) -> None:
        cfg, st = self.config, self.state
        names = [self.topics.name_of(s) for s in READS]
        only = None if self.recorded is None else {g for step in self.recorded.values() for g in step}
        join = Join(cfg.episodes_run, cfg.group_size, names[:2], decided=saved.decided, only=only)
        for k in range(st.issued):
            if group_id_of(cfg.run_id, k) not in join.decided:
                join.expect(group_id_of(cfg.run_id, k), self.clock())
        intake = Intake.of(self.topics, cfg.run_id, saved.read_to)
        inputs = Follower(
            cfg.bus,
            READS,
            offsets={(t, p): o for t, p, o in saved.offsets},
            also_required=(WORK, TRAIN_STEPS),
        )
        async with inputs:
            self._inputs = inputs
            task_status.started(self.metrics_port)
            self._waiting_since = time.perf_counter()
            checked = time.monotonic()
            while not stop.is_set() and not self._done():
                if time.monotonic() - checked > ENGINE_CHECK_S:
                    if st.weights:
                        await self.engine.restore(http, self.dir / st.weights, st.version)
                    checked = time.monotonic()
                await self._feed(producer, join)
                st.dead_letters += await intake.poll(inputs, join, self.clock, self.metrics.undecodable.inc)
                positions = await inputs.positions()
                await self._decide(join, positions)
                while True:
                    st.queue, stale = stale_in_queue(
                        st.queue, st.version, cfg.max_staleness, mask=cfg.on_stale == "mask"
                    )
                    for queued, detail in stale:
                        self._drop(join, queued.group, drop(DropReason.STALE, detail))
                    batch, st.queue = self._take(st.queue, join)
                    if batch is None:
                        break
                    await self._step(batch, join, positions, producer, http)
                    if self._done():
                        break
            positions = await inputs.positions()
            if st.drops or st.dead_letters:  # decided since the last step: commit and publish them too
                await self._commit([], join, positions, producer, http, weights_changed=False)

    def _done(self) -> bool:
        """``max_steps`` steps done, or a re-training's last recorded step."""
        step, max_steps = self.state.step, self.config.max_steps
        return bool(max_steps and step >= max_steps) or (
            self.recorded is not None and step >= max(self.recorded)
        )

    def _take(self, queue: list[Queued], join: Join) -> tuple[list[Queued] | None, list[Queued]]:
        """The next step's batch from the queue (None: none yet), and the queue left. A re-training
        whose recorded step lists a group it dropped stops there: it would wait for it forever, and the
        drop is the difference it was run to find; unless it rejudges (``rejudge``): the step goes on
        without it (empty if it lost every group)."""
        if self.recorded is None:
            ready = [ReadyGroup(q.group.group_id, len(q.decision.advantages)) for q in queue]
            take = next_batch(ready, self.config.episodes_per_step)
            return queue[:take] or None, queue[take:]
        wanted = self.recorded.get(self.state.step + 1, ())
        picked = recorded_batch(
            [q.group.group_id for q in queue], wanted, join.decided, rejudge=self.config.rejudge
        )
        if picked is None:
            return None, queue
        return [queue[i] for i in picked], [q for i, q in enumerate(queue) if i not in picked]

    # -- decisions --------------------------------------------------------------------------------------

    async def _feed(self, producer: EventProducer, join: Join) -> None:
        cfg, st = self.config, self.state
        if not cfg.tasks or self._done():
            return
        # the feeder's groups still open in the join (bounded by max_in_flight; not a scan of every
        # group the run ever issued, on every poll)
        undecided = sum(1 for group_id in join.groups if index_of(cfg.run_id, group_id) is not None)
        sampling = cfg.sampling
        while undecided < cfg.max_in_flight:
            for work in work_for_group(
                cfg.run_id,
                st.issued,
                tasks=self.tasks,
                group_size=cfg.group_size,
                policy_version=st.version,
                sampling=sampling,
                now=self.clock(),
            ):
                await producer.publish(WORK, work)
            join.expect(group_id_of(cfg.run_id, st.issued), self.clock())
            st.issued += 1
            undecided += 1
            self.metrics.groups_issued.inc()

    async def _decide(self, join: Join, positions: dict[tuple[str, int], int]) -> None:
        cfg, st = self.config, self.state
        queued = {q.group.group_id for q in st.queue}
        for group in join.ready(positions):
            if group.group_id in queued:
                continue
            judged = await self._evaluate(group)
            if judged.decision.train:
                st.queue.append(Queued(group, judged.decision, judged.samples))
            else:
                self._drop(join, group, judged.decision)
                for fault in judged.faults:
                    st.dead_letters.append(await dead_letter_for(self.config.bus, fault, group))
        for group in join.timed_out(self.clock(), cfg.group_timeout_s):
            scored = [
                EpisodeResult(episode_id, episode.score.verdict, st.version)
                for episode_id, episode in group.episodes.items()
                if episode.score is not None
            ]
            self._drop(join, group, decide(scored, cfg.policy, trainer_version=st.version, timed_out=True))

    async def _evaluate(self, group: GroupState) -> Judgement:
        return await judge(
            group,
            policy=self.config.policy,
            version=self.state.version,
            max_seq_len=self.config.max_seq_len,
            vocab=self.backend.vocabulary(),
            blobs=self.backend.blobs,
        )

    def _drop(self, join: Join, group: GroupState, decision: GroupDecision | None) -> None:
        assert decision is not None and decision.reason is not None
        join.close(group.group_id)
        self.metrics.drops.inc(reason=decision.reason.value)
        self.state.drops.append(
            GroupDropped(
                run_id=self.config.run_id,
                group_id=group.group_id,
                reason=decision.reason.value,
                detail=decision.detail,
                episode_ids=tuple(sorted(group.episodes)),
                trainer_version=self.state.version,
                dropped_at=self.clock(),
            )
        )

    # -- a step and its commit ------------------------------------------------------------------------

    async def _step(
        self,
        batch: list[Queued],
        join: Join,
        positions: dict[tuple[str, int], int],
        producer: EventProducer,
        http: httpx.AsyncClient,
    ) -> None:
        st = self.state
        items, self._masked_stale = train_items(
            batch,
            version=st.version,
            mask_bound=self.config.max_staleness,
            mask=self.config.on_stale == "mask",
        )
        for item in items:
            self.metrics.staleness.inc(lag=str(staleness(st.version, item.sample.oldest_version)))
        self._stale_tokens = token_staleness([item.sample for item in items], st.version)
        started = time.perf_counter()
        self._timings["wait_s"] = started - self._waiting_since  # no batch to train (judging included)
        self._lr = warmup_lr(self.config.lr, st.step, self.config.lr_warmup_steps)
        self.backend.set_lr(self._lr)
        nothing = StepStats.of(items, LossStats(0.0, 0.0, 0.0, 0))  # a rejudged step left with no group
        stats = await anyio.to_thread.run_sync(self.backend.step, items) if items else nothing
        if (pad := self.config.min_step_s - (time.perf_counter() - started)) > 0:
            await anyio.sleep(pad)  # a benchmark's fixed step time (trainer.min_step_s)
        self._timings["train_s"] = time.perf_counter() - started
        for queued in batch:
            join.close(queued.group.group_id)
        st.version += 1
        st.step += 1
        await self._commit(batch, join, positions, producer, http, weights_changed=True, stats=stats)

    async def _commit(
        self,
        batch: list[Queued],
        join: Join,
        positions: dict[tuple[str, int], int],
        producer: EventProducer,
        http: httpx.AsyncClient,
        *,
        weights_changed: bool,
        stats: StepStats | None = None,
    ) -> None:
        cfg, st = self.config, self.state
        if weights_changed:
            st.weights = ckpt.weights_name(st.version)
            started = time.perf_counter()
            await anyio.to_thread.run_sync(self.backend.save, self.dir / st.weights)  # a.
            self._timings["save_s"] = time.perf_counter() - started
        weights = st.weights
        outputs: list[Event] = []
        if stats is not None:
            self.metrics.stepped(
                groups=len(batch),
                logprob_gap=stats.loss.logprob_gap,
                grad_norm=stats.grad_norm,
                version=st.version,
            )
            step = train_step(
                cfg.run_id, step=st.step, version=st.version, batch=batch, stats=stats, lr=self._lr,
                timings=self._timings, stale_tokens=self._stale_tokens, masked_stale_tokens=self._masked_stale,
                finished_at=self.clock(), retrain_of=cfg.retrain_of,
            )  # fmt: skip
            outputs += [step, policy_version(step, str(self.dir / weights), self.clock())]
        outputs += st.drops
        outputs += st.dead_letters
        checkpoint = checkpoint_of(
            cfg.run_id, step=st.step, version=st.version, weights=weights, issued=st.issued,
            join=join, positions=positions, outputs=outputs,
        )  # fmt: skip
        await anyio.to_thread.run_sync(
            lambda: ckpt.save(
                self.dir, checkpoint, self.backend.optimizer_state(), keep_versions=cfg.keep_versions
            )
        )  # b.
        if weights_changed and cfg.engine_url:
            try:
                pushing, pushed_at = time.monotonic(), self.clock()
                await self.engine.push(http, self.dir / weights, st.version)  # c.
                self.metrics.weight_push_s.set(time.monotonic() - pushing)
                # the record of this step is in the checkpoint already (b.): the next step's carries it
                self._timings["previous_push_s"] = time.monotonic() - pushing
                self._timings["previous_push_at"] = pushed_at
            except EngineUnreachable as e:  # the engine watch loads them when it is back
                log.warning("%s; training goes on", e)
        await publish(producer, outputs)  # d.
        st.drops, st.dead_letters = [], []
        await anyio.to_thread.run_sync(self.sinks.write, outputs)  # TensorBoard, W&B (trainer.metrics_sinks)
        for event in outputs:
            if isinstance(event, TrainStep):
                self.on_step(event)
        self._waiting_since = time.perf_counter()


def _log_step(step: TrainStep) -> None:
    log.info("step %d: %s", step.step, describe_step(step))
