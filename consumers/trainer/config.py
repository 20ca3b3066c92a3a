"""Configuration of the trainer daemon (section ``trainer``; env ``CUA_TRAINER_<FIELD>``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from consumers.trainer.backends.megatron_layout import (
    ONE_RANK,
    ParallelLayout,
    device_layout_error,
    layout_error,
    read_model_shape,
)
from consumers.trainer.grpo.groups import GroupPolicy
from consumers.trainer.grpo.loss_config import LossConfig
from consumers.trainer.stream.feeder import sampling_of
from consumers.trainer.weights import WEIGHT_UPDATE_MODES
from cua_stream.config import BusConfig, ConfigError, Secret, require_model_dir, stage_config, state_dir
from cua_stream.identity import EVAL_RUN_PREFIX, is_eval_run
from cua_stream.metrics_sinks import SinkSpec
from cua_stream.tasks.refs import task_ref


def device_error(backend: str, device: str) -> str | None:
    """What is wrong with ``trainer.device`` beside ``trainer.backend``, if anything."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        return f"trainer.device: cpu, cuda or cuda:N, not {device!r}"
    if device != "cpu" and backend != "megatron":
        return f"trainer.device: {device!r} needs trainer.backend = 'megatron' (torch: the CPU)"
    return None


def replay_error(config: TrainerConfig) -> str | None:
    """What is wrong with a re-training's settings (``retrain_of``, the step range), if anything."""
    if (config.retrain_of or config.rejudge) and not config.replay_batches_from:
        return "trainer.retrain_of, trainer.rejudge: need trainer.replay_batches_from (where the steps are recorded)"
    if config.retrain_of == config.run_id:
        return (
            f"trainer.retrain_of: {config.run_id!r} is this trainer's own run: a retrain runs under a new id"
        )
    if config.replay_from_step < 1 or config.replay_to_step < 0:
        return "trainer.replay_from_step, trainer.replay_to_step: >= 1 and >= 0 (0: the last recorded step)"
    if config.replay_to_step and config.replay_to_step < config.replay_from_step:
        return (
            f"trainer.replay_to_step: {config.replay_to_step} is before replay_from_step "
            f"{config.replay_from_step}"
        )
    return None


class TrainerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The trainer: what it trains, on which groups, and where it publishes weights."""

    run_id: str
    """The run this trainer owns: it issues the run's work and trains only the run's episodes."""
    model_path: str
    """The starting weights and the processor (e.g. from ``cua-stream make-tiny-model``)."""
    tasks: list[str] = []
    """The tasks the feeder cycles through, one GRPO group per work item: bundled task names or Harbor
    task directories (``cua_stream.tasks.task_ref``); empty: no feeder (work is issued by someone else)."""
    group_size: int = 4
    """Episodes per group (the n of GRPO)."""
    groups_per_step: int = 2
    """Groups per optimizer step; a step holds ``groups_per_step * group_size`` episodes at most."""
    max_staleness: int = 1
    """Policy versions a group's oldest token may lag the trainer's; the feeder keeps at most
    ``(max_staleness + 1) * groups_per_step`` groups in flight."""
    on_stale: Literal["drop_group", "mask"] = GroupPolicy.on_stale
    """A group with tokens sampled more than ``max_staleness`` versions before the weights it would
    train: ``drop_group`` drops it whole (as ``stale``); ``mask`` trains it with those tokens' loss mask
    0 (not trained, still in the context) and the rest as usual, and drops it as ``stale`` only when
    every token it would train is past the bound (nothing left to train). Checked again at the step, for
    a group that waited in the queue. Each step records how many tokens it masked
    (``masked_stale_tokens``); consumers/trainer/grpo/stale_mask.py."""
    on_discard: Literal["drop_group", "keep_survivors"] = GroupPolicy.on_discard
    """A group with a discarded episode: ``drop_group`` drops it whole (a discard is not the policy's
    doing, and the survivors alone would bias the baseline); ``keep_survivors`` trains the rewarded
    episodes when at least ``min_survivors`` remain (consumers/trainer/grpo/groups.py)."""
    min_survivors: int = GroupPolicy.min_survivors
    """With ``keep_survivors``: the fewest rewarded episodes a group with discards trains with."""
    filter_zero_variance: bool = GroupPolicy.filter_zero_variance
    """Drop a group whose rewards are all equal (no signal: every advantage is 0)."""
    std_normalize: bool = GroupPolicy.std_normalize
    """Advantages ``(r - mean) / (std + eps)`` over the group (GRPO); False: ``r - mean`` (Dr. GRPO)."""
    negative_scale: float = GroupPolicy.negative_scale
    """Multiplies the advantages of episodes under their group's mean (1: GRPO; 0: only the episodes
    that beat it are reinforced, RAFT-style; consumers/trainer/grpo/groups.py)."""
    group_timeout_s: float = 900.0
    """A group not complete this long after it was issued (or first seen) is dropped as ``timeout``."""
    max_seq_len: int = 32768
    """The longest sample trained, in tokens: a longer one is cut at a call boundary
    (consumers/trainer/episodes/samples.py)."""
    temperature: float = 1.0
    """The training temperature (the sessions sample with it; logprobs are taken at it)."""
    max_new_tokens: int = 512
    """Completion cap the feeder puts in each work request's sampling."""
    top_k: int = -1
    """Sample from the ``top_k`` likeliest tokens only (SGLang's ``top_k``; -1: off), put in each work
    request's sampling. Logprobs stay the unfiltered distribution's on both sides, engine and trainer
    (SGLang's default, as in Miles' ``rollout_top_k``): the ratio compares like with like, and the tokens
    cut are never drawn, so no logprob of theirs enters the loss."""
    top_p: float = 1.0
    """Nucleus sampling (SGLang's ``top_p``; 1: off), like ``top_k``."""
    min_p: float = 0.0
    """Drop tokens less likely than ``min_p`` times the likeliest (SGLang's ``min_p``; 0: off), like
    ``top_k``."""
    backend: Literal["torch", "megatron"] = "torch"
    """What trains: ``torch`` (Hugging Face transformers in this process) or ``megatron``
    (megatron-bridge's Qwen3-VL in a worker process of its own venv, ``scripts/megatron-env.sh``; the
    same step: consumers/trainer/backends/megatron_vl_backend.py). A checkpoint's optimizer state resumes the
    backend that wrote it only."""
    device: str = "cpu"
    """Where the megatron backend's model trains: ``cpu`` (float32) or ``cuda`` / ``cuda:N`` (bfloat16
    weights, float32 AdamW masters: consumers/trainer/backends/megatron/worker.py). The torch backend trains
    on the CPU."""
    tensor_parallel_size: int = 1
    """The megatron backend's tensor-parallel ranks (TP): each layer's attention heads (key/value and the
    vision tower's too) split over this many ranks, so it must divide each head count
    (consumers/trainer/backends/megatron_layout.py)."""
    pipeline_parallel_size: int = 1
    """The megatron backend's pipeline stages (PP): the language model's layers split over this many ranks,
    so it must divide the layer count."""
    distributed_optimizer: bool = False
    """The megatron backend's optimizer state sharded over the data-parallel replicas (Megatron's
    distributed optimizer; its reduce-scatter and all-gather need NCCL or a gloo that has them)."""
    nproc_per_node: int = 1
    """The megatron backend's worker ranks per node (torchrun's ``--nproc_per_node``; on GPUs one per GPU).
    The ranks over ``tensor_parallel_size * pipeline_parallel_size`` are the data-parallel replicas."""
    nnodes: int = 1
    """Nodes the megatron backend's worker ranks span (torchrun's ``--nnodes``; more than one needs
    ``rdzv_endpoint``)."""
    rdzv_endpoint: str = ""
    """torchrun's rendezvous endpoint (``host:port``, c10d) for worker ranks on several nodes; empty: one
    node, standalone."""
    lr: float = 1e-5
    """AdamW's learning rate (after the warmup)."""
    lr_warmup_steps: int = 0
    """Optimizer steps over which the learning rate ramps linearly up to ``lr`` (0: none;
    consumers/trainer/grpo/lr_schedule.py says why)."""
    passes: int = 1
    """Optimizer updates per step on the step's batch (GRPO's μ; PPO's epochs): after the first, the
    ratio clip bounds how far a token's probability moves from the sampler's."""
    clip_low: float = LossConfig.clip_low
    """PPO's clip below: a token's ratio is clipped at ``1 - clip_low`` (consumers/trainer/grpo/loss.py)."""
    clip_high: float = LossConfig.clip_high
    """PPO's clip above: a token's ratio is clipped at ``1 + clip_high`` (higher than ``clip_low``: DAPO's
    clip-higher)."""
    tis_clip: float | None = LossConfig.tis_clip
    """Truncated importance sampling: the loss is weighted by ``min(exp(logp_old - logp_rollout),
    tis_clip)``, the correction for an engine whose logprobs differ from the trainer's; None: off."""
    kl_coef: float = LossConfig.kl_coef
    """Weight of the k3 KL to the run's starting weights in every token's loss (GRPO's β; 0: off, no
    reference model kept). Costs one more forward pass per step."""
    loss_reduction: Literal["episode", "token"] = LossConfig.reduction
    """``episode``: GRPO's token mean per episode, then the mean over episodes; ``token``: DAPO's mean
    over every trained token of the step (consumers/trainer/grpo/loss.py says when each fits)."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before each optimizer step."""
    max_steps: int = 0
    """Stop after this many optimizer steps (0: run until stopped)."""
    checkpoint_dir: str = ""
    """Checkpoints and published weights; empty: ``<state dir>/trainer/<run_id>``."""
    keep_versions: int = 1
    """Weights of the last this many versions kept in ``checkpoint_dir`` (older ones are deleted as each
    step commits). 1 (only the current, what a restart needs): each is a full float32 copy of the model,
    so more is opt-in. ``cua-stream inspect step --recompute`` of step N loads version N-1's: keep 2 or
    more to recompute the latest steps of a run (step 1 starts from ``model_path``, always there)."""
    replay_batches_from: str = ""
    """Re-train a run from a replayed range (docs/how-to/replay-and-tap.md): the topic prefix
    the run first trained on. The trainer then takes each step's groups as that run's ``TrainStep``
    records list them, in their order (not as they complete), and stops after its last recorded step;
    empty: batches are taken as groups complete."""
    retrain_of: str = ""
    """With ``replay_batches_from``: the run whose recorded steps this one trains again (``cua-stream
    retrain``): it trains that run's episodes, not its own, and marks its records as a retrain of it;
    empty: its own run's (a replayed range)."""
    replay_from_step: int = 1
    """With ``replay_batches_from``: the first recorded step to train again (the checkpoint starts at
    the step before it)."""
    replay_to_step: int = 0
    """With ``replay_batches_from``: the last recorded step to train again (0: the run's last)."""
    rejudge: bool = False
    """With ``replay_batches_from``: a recorded step's group this trainer drops under its own rules is left
    out of the step (its ``GroupDropped`` says why; a step left with none changes no weight) instead of
    stopping the re-training (``cua-stream retrain --rejudge``)."""
    blob_dir: str = ""
    """The blob store the gateway writes screenshots to (a directory or ``s3://bucket/prefix``); empty:
    ``<state dir>/blobs``."""
    engine_url: str = ""
    """Where new weights are loaded (``/update_weights_from_disk``); empty: not pushed."""
    gateway_url: str = ""
    """The session gateway to drain (``drain``) or to tell of a retraction (``retract``) around a weight
    update; empty: none."""
    weight_update: str = "drain"
    """How new weights reach the engine: ``drain`` (the gateway drained, then the load), ``in_place``
    (the engine paused between decode steps, the load, calls in flight finish under the new weights)
    or ``retract`` (generations in flight aborted and continued by the gateway under the new weights).
    docs/reference/commands.md, trainer."""
    drain_timeout_s: float = 60.0
    """``weight_update = drain``: how long the gateway, closed to new calls, waits for the calls in flight
    to finish before the weights load anyway."""
    min_step_s: float = 0.0
    """For benchmarks only: each optimizer step is padded (a sleep) to at least this long, a fixed step
    time standing in for a real model's (``bench/loop_sync_async.py``); 0: no padding."""
    engine_api_key: Secret | None = None
    """The engine's admin key (weight loads), when the engine has one."""
    gateway_api_key: Secret | None = None
    """The gateway's admin key (drain and resume around a weight load), when it has one."""
    metrics_host: str = "127.0.0.1"
    """The address the metrics page binds (with ``metrics_port``)."""
    metrics_port: int | None = None
    """Serve Prometheus text at http://<metrics_host>:<metrics_port>/metrics (0: any free port; None: off)."""
    metrics_sinks: list[str] = []
    """Where each step's scalars also go, as it is published: ``tensorboard:DIR`` (event files under
    ``DIR/<run_id>``) or ``wandb:DIR`` (an offline W&B run; ``wandb sync`` uploads it). docs/how-to/metrics.md."""
    bus: BusConfig = BusConfig()
    """Filled from the ``[bus]`` section (the trainer's own section holds no bus settings)."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}", self.run_id):
            raise ConfigError(
                f"trainer.run_id: {self.run_id!r}: use 1-128 letters, digits, '.', '_' or '-' (it names "
                "the run's groups and its checkpoint directory)"
            )
        if is_eval_run(self.run_id):
            raise ConfigError(
                f"trainer.run_id: {self.run_id!r} is an evaluation's run id ({EVAL_RUN_PREFIX}...): "
                "evaluation work is never trained"
            )
        if not self.model_path:
            raise ConfigError("trainer.model_path: required")
        require_model_dir("trainer.model_path", self.model_path)
        for task in self.tasks:
            try:
                task_ref(task)
            except ValueError as e:
                raise ConfigError(f"trainer.tasks: {e}") from None
        for name in (
            "group_size",
            "groups_per_step",
            "min_survivors",
            "max_seq_len",
            "max_new_tokens",
            "passes",
            "keep_versions",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name}: must be >= 1")
        for name in ("max_staleness", "max_steps", "kl_coef", "negative_scale", "lr_warmup_steps"):
            if not getattr(self, name) >= 0:  # NaN too
                raise ConfigError(f"trainer.{name}: must be >= 0")
        if self.top_k == 0 or self.top_k < -1:
            raise ConfigError(f"trainer.top_k: -1 (off) or >= 1, not {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"trainer.top_p: in (0, 1], not {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ConfigError(f"trainer.min_p: in [0, 1), not {self.min_p}")
        if self.replay_batches_from and self.tasks:
            raise ConfigError(
                "trainer.replay_batches_from: a re-training trains the replayed groups; trainer.tasks must be "
                "empty (it would issue new work)"
            )
        if (
            self.replay_batches_from
            and self.replay_batches_from == self.bus.topic_prefix
            and not self.retrain_of
        ):
            raise ConfigError(
                f"trainer.replay_batches_from: {self.replay_batches_from!r} is the prefix this trainer "
                "trains on: give the original run's prefix, the replay's as bus.topic_prefix"
            )
        if error := replay_error(self):
            raise ConfigError(error)
        for sink in self.metrics_sinks:
            try:
                SinkSpec.parse(sink)
            except ValueError as e:
                raise ConfigError(f"trainer.metrics_sinks: {e}") from None
        if self.weight_update not in WEIGHT_UPDATE_MODES:
            raise ConfigError(
                f"trainer.weight_update: expected one of {', '.join(WEIGHT_UPDATE_MODES)}, "
                f"not {self.weight_update!r}"
            )
        if error := device_error(self.backend, self.device):
            raise ConfigError(error)
        if error := self.layout_error():
            raise ConfigError(error)
        if not self.min_step_s >= 0:
            raise ConfigError("trainer.min_step_s: must be >= 0 (0: no padding)")
        if self.lr <= 0 or self.temperature <= 0 or self.group_timeout_s <= 0:
            raise ConfigError("trainer.lr, trainer.temperature and trainer.group_timeout_s: must be > 0")

    @property
    def layout(self) -> ParallelLayout:
        """The megatron backend's ranks and how they split the model."""
        return ParallelLayout(
            tensor=self.tensor_parallel_size,
            pipeline=self.pipeline_parallel_size,
            nproc_per_node=self.nproc_per_node,
            nnodes=self.nnodes,
            distributed_optimizer=self.distributed_optimizer,
            rdzv_endpoint=self.rdzv_endpoint,
        )

    def layout_error(self) -> str | None:
        """What is wrong with the parallel layout, if anything: only the megatron backend takes one, and
        it must fit the model (its ``config.json``, read here) and the device."""
        layout = self.layout
        if layout == ONE_RANK:
            return None
        if self.backend != "megatron":
            return "trainer.tensor_parallel_size, pipeline_parallel_size, nproc_per_node, nnodes: need trainer.backend = 'megatron'"
        try:
            shape = read_model_shape(self.model_path)
        except (OSError, ValueError, KeyError) as e:
            return f"trainer.model_path: no model shape to check the parallel layout against ({e})"
        return layout_error(layout, shape) or device_layout_error(self.device, layout)

    @property
    def policy(self) -> GroupPolicy:
        return GroupPolicy(
            group_size=self.group_size,
            on_discard=self.on_discard,
            min_survivors=self.min_survivors,
            filter_zero_variance=self.filter_zero_variance,
            max_staleness=self.max_staleness,
            on_stale=self.on_stale,
            std_normalize=self.std_normalize,
            negative_scale=self.negative_scale,
        )

    @property
    def loss(self) -> LossConfig:
        return LossConfig(
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            tis_clip=self.tis_clip,
            reduction=self.loss_reduction,
            kl_coef=self.kl_coef,
        )

    @property
    def sampling(self) -> dict[str, Any]:
        """The sampling parameters of the run's work."""
        return sampling_of(
            self.temperature, self.max_new_tokens, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p
        )

    @property
    def episodes_run(self) -> str:
        """The run whose episodes this trainer trains: its own, or the one it retrains."""
        return self.retrain_of or self.run_id

    @property
    def episodes_per_step(self) -> int:
        return self.groups_per_step * self.group_size

    @property
    def max_in_flight(self) -> int:
        """Groups issued and not yet decided, at most."""
        return (self.max_staleness + 1) * self.groups_per_step

    @property
    def checkpoints(self) -> Path:
        return Path(self.checkpoint_dir) if self.checkpoint_dir else state_dir() / "trainer" / self.run_id

    @property
    def blobs(self) -> str:
        """The blob store's location: a directory, or ``s3://bucket/prefix`` (not a Path: it would fold
        the URL's ``//``)."""
        return self.blob_dir or str(state_dir() / "blobs")


TRAINER_DEFAULTS: Mapping[str, Any] = {
    f.name: f.default for f in msgspec.structs.fields(TrainerConfig) if f.default is not msgspec.NODEFAULT
}
"""Each ``[trainer]`` field's default, for the views of the section that other commands read
(``inspect.step``'s ``StepRules`` and ``RecomputeRules``): written once, on ``TrainerConfig``."""


def trainer_config(
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    bus_overrides: Mapping[str, Any] | None = None,
) -> TrainerConfig:
    """The ``[trainer]`` section (file < env < overrides) with the ``[bus]`` section inside it."""
    return stage_config(TrainerConfig, file_data, overrides, bus_overrides)
