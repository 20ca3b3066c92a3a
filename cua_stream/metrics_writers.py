"""The writers of a run's scalars (TensorBoard event files, an offline W&B run) and the sink that feeds
one of them each step once: the trainer's live sink and ``cua-stream export-metrics`` both use it.

Each step once, across processes: before its first write a sink reads back the highest step its
directory already holds, and writes only later steps. A high-water mark rather than a set of steps,
because both boards want a tag's steps in increasing order: TensorBoard reads a step lower than the one
before it as a restarted run and discards the later points (its "orphaned data" purge), and W&B ignores
a step lower than its run's current one. So a step missed in the middle (a sink that failed for a while)
stays missing; an export into a new directory has every step.

The libraries are imported when a writer first writes or reads: torch's (which the TensorBoard writer
is) costs seconds, and a light command must not pay for it.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from cua_stream.events import Event, GroupDropped
from cua_stream.metrics_sinks import Scalar, SinkSpec, charge, step_scalars

log = logging.getLogger(__name__)

WANDB_PROJECT = "cua-stream"
WANDB_MARKER = "cua-stream-steps.json"
"""In a W&B directory: the highest step written per run (wandb 0.31 has no reader of its offline
``.wandb`` files in Python; its Go core reads them at ``wandb sync``)."""


class Writer(Protocol):
    def last_step(self) -> int | None:
        """The highest step the destination holds for this run (None: none)."""
        ...

    def write(self, scalars: Sequence[Scalar]) -> None: ...

    def close(self) -> None: ...


class TensorBoardWriter:
    """Event files under ``ROOT/<run_id>`` (a TensorBoard run per cua-stream run: ``tensorboard
    --logdir ROOT`` compares them). Read back with TensorBoard's own ``EventAccumulator``: the files are
    the only record of what was written, so no marker can disagree with them."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.dir = root / run_id
        self._writer: Any = None

    def last_step(self) -> int | None:
        if not self.dir.is_dir():
            return None
        from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

        acc = EventAccumulator(str(self.dir), size_guidance={SCALARS: 0})  # 0: keep every point
        acc.Reload()
        return max((e.step for tag in acc.Tags()[SCALARS] for e in acc.Scalars(tag)), default=None)

    def write(self, scalars: Sequence[Scalar]) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.dir))
        for s in scalars:
            self._writer.add_scalar(s.tag, s.value, s.step, walltime=s.wall_time)
        self._writer.flush()  # a step is on disk once written: a crash after it must not lose it

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbWriter:
    """An offline W&B run under ``ROOT/wandb/offline-run-*`` with the cua-stream run's id (``wandb sync
    ROOT/wandb/offline-run-*`` uploads it later). Offline is passed to ``wandb.init``, not read from
    WANDB_MODE: it never touches the network. W&B stamps each step with the time it was logged; the
    step's own finish time is in ``time/finished_at``."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.root, self.run_id = root, run_id
        self._run: Any = None

    @property
    def marker(self) -> Path:
        return self.root / WANDB_MARKER

    def _marks(self) -> dict[str, int]:
        return json.loads(self.marker.read_text()) if self.marker.exists() else {}

    def last_step(self) -> int | None:
        return self._marks().get(self.run_id)

    def write(self, scalars: Sequence[Scalar]) -> None:
        if self._run is None:
            self._run = _wandb_run(self.root, self.run_id)
        by_step: dict[int, dict[str, float]] = defaultdict(dict)
        for s in scalars:
            by_step[s.step][s.tag] = s.value
            by_step[s.step]["time/finished_at"] = s.wall_time
        for step in sorted(by_step):
            # The mark first: a crash between the two loses this step rather than writing it twice.
            marks = self._marks() | {self.run_id: step}
            tmp = self.marker.with_suffix(".tmp")
            tmp.write_text(json.dumps(marks, sort_keys=True))
            tmp.replace(self.marker)
            self._run.log(by_step[step], step=step)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


def _wandb_run(root: Path, run_id: str) -> Any:
    import wandb

    root.mkdir(parents=True, exist_ok=True)
    _after_last_session(root, run_id)
    settings = wandb.Settings(
        mode="offline",
        console="off",  # the trainer's own logs stay where they are
        silent=True,
        save_code=False,
        disable_git=True,
        x_disable_stats=True,  # no system-metrics sampler in the trainer's process
        x_disable_machine_info=True,
    )
    return wandb.init(
        mode="offline", dir=str(root), project=WANDB_PROJECT, id=run_id, name=run_id, settings=settings
    )


def open_writer(spec: SinkSpec, run_id: str) -> Writer:
    if spec.kind == "tensorboard":
        return TensorBoardWriter(spec.dir, run_id)
    return WandbWriter(spec.dir, run_id)


class MetricsSink:
    """One run's records into one writer, each step once (module docstring)."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.last: int | None = None
        self._read_back = False
        self._held: list[GroupDropped] = []
        """Drops whose step has not come yet (the trainer stopped after deciding them)."""
        self._version = -1

    @property
    def waiting(self) -> int:
        """Drops held for a step not seen yet."""
        return len(self._held)

    def write(self, records: Iterable[Event]) -> list[int]:
        """Write the steps among ``records`` (with their drops) that the destination does not hold yet;
        returns them."""
        if not self._read_back:
            self.last = self.writer.last_step()
            self._read_back = True
        charged = charge([*self._held, *records])
        self._version = max([self._version, *(s.policy_version for s, _ in charged.steps)])
        # a held drop whose step went by in another batch will never be charged here: let it go
        self._held = [d for d in charged.waiting if d.trainer_version + 1 > self._version]
        scalars: list[Scalar] = []
        written: list[int] = []
        for step, drops in charged.steps:
            if self.last is not None and step.step <= self.last:
                continue
            scalars += step_scalars(step, drops, charged.issued)
            written.append(step.step)
        if scalars:
            self.writer.write(scalars)
            self.last = written[-1]
        return written

    def close(self) -> None:
        self.writer.close()


def _after_last_session(root: Path, run_id: str) -> None:
    """W&B names an offline run's directory by the second it starts (``offline-run-<%Y%m%d_%H%M%S>-<id>``):
    a writer started within the second an earlier one of the same run started (a trainer restarted at
    once, an export right after) would share its directory and overwrite its file, losing its steps.
    Wait into the next second when that name is taken."""
    while (root / "wandb" / f"offline-run-{time.strftime('%Y%m%d_%H%M%S')}-{run_id}").exists():
        time.sleep(1.0 - time.time() % 1.0 + 0.01)
