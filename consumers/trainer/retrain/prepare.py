"""``cua-stream retrain``'s I/O edge: the source run's steps and settings read from its log, the plan
made of them (``plan``, pure), and the retrain's checkpoint directory prepared at its starting
weights. The training itself is the trainer daemon's, under ``trainer.retrain_of``: it takes each
recorded step's groups in their order, and checkpoints and resumes as any trainer does, so a kill -9 at
any moment loses no step and trains none twice (the command run again resumes it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TRAINER_DEFAULTS, TrainerConfig
from consumers.trainer.retrain.plan import (
    change_lines,
    parse_override,
    retrain_settings,
    start_of,
    steps_note,
    unknown_settings,
)
from consumers.trainer.retrain.rerun import (
    RecordedRun,
    parse_steps,
    read_recorded,
    settings_changes,
    settings_in_force,
    spans,
    steps_in_range,
)
from consumers.trainer.retrain.settings import public_settings
from consumers.trainer.retrain.settings_diff import changed_settings
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig, ConfigError, convert, state_dir
from cua_stream.events import PolicyVersion
from cua_stream.topics import POLICY


@dataclass(frozen=True)
class RetrainRequest:
    """What the command was asked (its options, unparsed)."""

    source_run: str
    run_id: str
    steps: str = ""
    overrides: Sequence[str] = ()
    start: str = ""
    batches_from: str = ""
    """The prefix of the source run's ``TrainStep`` and settings records; empty: the bus's."""
    checkpoint_dir: str = ""
    """The retrain's own; empty: ``<state dir>/trainer/<run id>``."""
    rejudge: bool = TRAINER_DEFAULTS["rejudge"]
    """Decide the recorded groups again under the retrain's rules (``plan.SAMPLE_RULES`` may change)."""


@dataclass(frozen=True)
class Start:
    """The weights the retrain's first step starts from (None: the source run's start model), and the
    optimizer state that goes with them, if any was kept."""

    weights: Path | None
    optimizer: Path | None
    what: str


@dataclass(frozen=True)
class RetrainPlan:
    config: TrainerConfig
    source: dict[str, Any]
    """The settings the source run trained the first retrained step with (its record's)."""
    source_from: int
    """The step those settings trained from (their record's ``step`` + 1)."""
    changed: dict[str, Any]
    batches: dict[int, tuple[str, ...]]
    recorded: RecordedRun
    start: Start
    resume_at: int | None
    """The step the retrain's checkpoint is at, when there is one (it resumes)."""
    notes: list[str] = field(default_factory=list)


async def plan_retrain(bus: BusConfig, request: RetrainRequest) -> RetrainPlan:
    """The retrain ``request`` asks for, checked against the log: ConfigError (one line) for a run or
    step not there, a setting it may not change, a bad value, or a run id already taken."""
    first, last = parse_steps(request.steps)
    overrides = dict(parse_override(item, rejudge=request.rejudge) for item in request.overrides)
    batches_from = request.batches_from or bus.topic_prefix
    recorded = await read_recorded(bus, batches_from, request.source_run)
    batches = steps_in_range(recorded, first, last)
    last = max(batches)
    in_force = settings_in_force(recorded.settings, first)
    if in_force is None:
        raise ConfigError(
            f"run {request.source_run!r} has no settings record for step {first} on {recorded.where} (it "
            "trained before trainers published them): retrain it from a replayed range with its config (docs/how-to/replay-and-tap.md)"
        )
    if unknown := unknown_settings(in_force.settings):
        raise ConfigError(
            f"run {request.source_run!r} trained with settings this trainer does not know "
            f"({', '.join(f'trainer.{k}' for k in unknown)}): retrain it with the version that wrote them"
        )
    directory = request.checkpoint_dir or str(state_dir() / "trainer" / request.run_id)
    values = retrain_settings(
        in_force.settings, overrides, source_run=request.source_run, run_id=request.run_id,
        batches_from=batches_from, steps=(first, last), checkpoint_dir=directory, rejudge=request.rejudge,
    )  # fmt: skip
    config = msgspec.structs.replace(convert(TrainerConfig, "trainer", values), bus=bus)
    resume_at = await _resume_step(bus, config)
    start = Start(None, None, "its checkpoint") if resume_at is not None else None
    if start is None:
        start = await resolve_start(bus, start_of(request.start, first), recorded.run_id, in_force.settings)
    notes = [
        f"{recorded.run_id} resumed at step {at} with other {', '.join(fields)}: this retrain keeps the "
        f"settings of step {first} throughout"
        for at, fields in settings_changes(recorded.settings, first, last)
    ]
    if resume_at is None and start.optimizer is None and first > 1:
        notes.append(
            f"the optimizer starts afresh: {recorded.run_id}'s state at v{first - 1} is not kept (--start a "
            f"copy of its checkpoint directory taken at step {first - 1} to carry it on)"
        )
    changed = changed_settings(in_force.settings, public_settings(config))
    return RetrainPlan(
        config, in_force.settings, in_force.step + 1, changed, batches, recorded, start, resume_at, notes
    )


def plan_lines(plan: RetrainPlan) -> list[str]:
    """The plan as the command shows it before it trains: what, where, from which weights, and each
    setting that differs from the source run's."""
    cfg, source = plan.config, plan.config.retrain_of
    where = cfg.bus.topic_prefix
    if cfg.replay_batches_from != where:
        where += f" (its steps from {cfg.replay_batches_from})"
    began = f"resuming at step {plan.resume_at}" if plan.resume_at is not None else f"from {plan.start.what}"
    steps = steps_note(min(plan.batches), max(plan.batches), list(plan.batches.values()))
    lines = [f"retrain of {source} as {cfg.run_id}: {steps} on {where}, {began}"]
    settings = f"settings: {source}'s (its record from step {plan.source_from})"
    lines.append(f"{settings}, changed:" if plan.changed else f"{settings}, none changed")
    lines += [f"  {line}" for line in change_lines(plan.source, plan.changed)]
    return lines + [f"note: {note}" for note in plan.notes]


async def _resume_step(bus: BusConfig, config: TrainerConfig) -> int | None:
    """The step the retrain's checkpoint is at (it resumes), or None for a new one; ConfigError if its
    run id is another run's (steps on the log and no checkpoint here, or a retrain of another run)."""
    saved = ckpt.load(config.checkpoints)
    mine = await read_recorded(bus, bus.topic_prefix, config.run_id)
    others = [s.retrain_of for s in mine.settings if s.retrain_of != config.retrain_of]
    if others or (saved is None and mine.steps):
        if others and others[-1]:
            what = f"a retrain of {others[-1]!r}"
        else:
            what = f"steps {spans(sorted(mine.steps))}" if mine.steps else "own settings (a live run)"
        raise ConfigError(
            f"--run-id {config.run_id!r}: {mine.where} holds that run's {what}: give the retrain a new id"
        )
    if saved is not None and saved.run_id != config.run_id:
        raise ConfigError(
            f"--checkpoint-dir {config.checkpoints} holds run {saved.run_id!r}'s checkpoint, not {config.run_id!r}'s"
        )
    return saved.step if saved is not None else None


async def resolve_start(bus: BusConfig, start: int | str, run: str, settings: dict[str, Any]) -> Start:
    """Where ``start`` (``plan.start_of``) is: a version of ``run`` (from its ``PolicyVersion``
    records' weights, else its checkpoint directory), or a directory named."""
    if isinstance(start, str):
        return start_from_path(Path(start))
    if start == 0:
        return Start(None, None, f"{run}'s start model {settings['model_path']} (v0)")
    published = [
        Path(d.event.weights_path)
        async for d in scan(bus, POLICY)
        if isinstance(d.event, PolicyVersion) and d.event.run_id == run and d.event.version == start
    ]
    home = Path(settings["checkpoint_dir"])
    for weights in [*published, home / ckpt.weights_name(start)]:
        if (weights / "config.json").is_file():
            saved = ckpt.load(home) if (home / ckpt.FILE).is_file() else None
            kept = saved is not None and saved.version == start and saved.optimizer
            optimizer = home / saved.optimizer if kept and saved is not None else None
            return Start(weights, optimizer, f"{run}'s v{start} ({weights})")
    raise ConfigError(
        f"--start v{start}: {run}'s v{start} weights are not in {home} (it keeps the last "
        f"trainer.keep_versions = {settings.get('keep_versions')} versions): --start a copy of its checkpoint "
        f"directory taken at step {start}, or a model directory"
    )


def start_from_path(path: Path) -> Start:
    """A trainer checkpoint directory (its current weights and optimizer state) or a model directory."""
    if (path / ckpt.FILE).is_file():
        saved = ckpt.load(path)
        assert saved is not None
        weights = path / saved.weights if saved.weights else None
        optimizer = path / saved.optimizer if saved.optimizer else None
        what = f"checkpoint {path} (run {saved.run_id} at v{saved.version}, with its optimizer state)"
        return Start(weights, optimizer, what)
    if (path / "config.json").is_file():
        return Start(path, None, f"model directory {path}")
    raise ConfigError(f"--start {path}: not vN, a trainer checkpoint directory or a model directory")


def prepare_start(plan: RetrainPlan) -> None:
    """A new retrain's checkpoint directory at the step before its first, holding its starting weights
    (and optimizer state): the trainer resumes from it as from its own. Nothing to do for a retrain that
    resumes, or one that starts at step 1 from the source's start model (a trainer's fresh start). The
    checkpoint file comes last, so a kill before it leaves a directory this prepares again."""
    directory = plan.config.checkpoints
    step = plan.config.replay_from_step - 1
    if plan.resume_at is not None or (plan.start.weights is None and step == 0):
        return
    directory.mkdir(parents=True, exist_ok=True)
    saved = ckpt.Checkpoint(run_id=plan.config.run_id, step=step, version=step)
    if plan.start.weights is not None:
        saved.weights = ckpt.weights_name(step)
        _link_tree(plan.start.weights, directory / saved.weights)
    if plan.start.optimizer is not None:
        saved.optimizer = f"optimizer-v{step}.pt"
        shutil.copyfile(plan.start.optimizer, directory / saved.optimizer)
    ckpt.commit(directory, saved)


def _link_tree(source: Path, target: Path) -> None:
    """``source``'s files at ``target``, hard-linked where the filesystem allows (weights are never
    rewritten in place: a save writes a new directory), else copied; what a killed attempt left goes."""
    shutil.rmtree(target, ignore_errors=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)
