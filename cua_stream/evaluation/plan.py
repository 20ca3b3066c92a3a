"""What an evaluation runs: a task set x layouts x samples, on layouts training never uses.

**Layouts apart from training, by construction.** Evaluation layout seeds are ``EVAL_SEED_BASE + i``
with ``0 <= i < EVAL_SEED_SPAN``, i.e. in [2**40, 2**40 + 2**32). The trainer's groups carry no seed:
their layout is the CRC-32 of the group id (``identity.layout_seed``), below 2**32. ``learn``'s
demonstrations, evaluations and probes sit at ``2**32 + seed * 10**7 + ...``, below 2**40 for every
learn seed under ~109,000 (a test holds the two apart). ``record-oracle`` takes its ``--first-seed``
as given (1 by default).

**Groups.** One group per task instance (task and layout), its ``samples`` episodes sharing the layout:
pass@k is the chance one of k tries at the same instance succeeds. The names are those of instances
(``identity.instance_group_id``, made by ``consumers.trainer.stream.feeder.instance_work``), which no trainer
takes for its own: a trainer joins only its run id's records (``consumers.trainer.stream.join``).

Resolving ``--tasks`` reads the file system (task directories, globs); the rest is pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cua_stream.errors import UnknownTask
from cua_stream.events import TaskRef
from cua_stream.tasks import TASKS
from cua_stream.tasks.miniwob import is_miniwob
from cua_stream.tasks.refs import expand_tasks, task_ref

EVAL_SEED_BASE = 2**40
EVAL_SEED_SPAN = 2**32


def eval_seeds(first: int, count: int) -> list[int]:
    """The layout seeds of ``count`` instances per task, from index ``first`` of the evaluation range."""
    if count < 1:
        raise ValueError(f"at least one layout per task, got {count}")
    if first < 0 or first + count > EVAL_SEED_SPAN:
        raise ValueError(f"layout indices {first}..{first + count - 1} are outside 0..{EVAL_SEED_SPAN - 1}")
    return [EVAL_SEED_BASE + first + i for i in range(count)]


def is_eval_seed(seed: int) -> bool:
    return EVAL_SEED_BASE <= seed < EVAL_SEED_BASE + EVAL_SEED_SPAN


def resolve_tasks(spec: str) -> list[TaskRef]:
    """``--tasks``: comma-separated bundled task names, ``all`` (the bundled tasks), ``miniwob`` (the
    MiniWoB++ suite), MiniWoB++ task names or globs of them (``miniwob/click-*``), Harbor task
    directories, globs of them, or dataset directories (a directory of task directories). ValueError
    naming the entry that is none of these, or two tasks of one name (their groups would collide)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ValueError("no task given")
    names = [name for p in parts for name in (TASKS if p == "all" else [p])]
    refs = [task_ref(entry) for entry in expand_tasks(names)]
    for ref in refs:
        if ref.path is None and ref.name not in TASKS and not is_miniwob(ref.name):
            raise UnknownTask(
                f"{ref.name!r} is neither a bundled task ({', '.join(TASKS)}), a MiniWoB++ task "
                "(miniwob/<name>) nor a Harbor task directory"
            )
    seen: dict[str, TaskRef] = {}
    for ref in refs:
        if ref.name in seen and seen[ref.name] != ref:
            raise ValueError(f"two tasks are named {ref.name!r} ({_where(seen[ref.name])}, {_where(ref)})")
        seen[ref.name] = ref
    return list(seen.values())


def _where(ref: TaskRef) -> str:
    return ref.path or f"bundled {ref.name}"


@dataclass(frozen=True)
class EvalPlan:
    tasks: tuple[TaskRef, ...]
    samples: int
    """Episodes per instance: the k of pass@k."""
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"at least one sample per task instance, got {self.samples}")
        if not self.tasks or not self.seeds:
            raise ValueError("an evaluation needs at least one task and one layout")
        outside = [s for s in self.seeds if not is_eval_seed(s)]
        if outside:
            raise ValueError(f"layout seeds {outside} are outside the evaluation range (eval_seeds)")

    @property
    def episodes(self) -> int:
        return len(self.tasks) * len(self.seeds) * self.samples

    def unplayable(self, plays: Callable[[str], bool]) -> list[str]:
        """The plan's tasks a scripted policy cannot play (``plays``: whether it plays a task name)."""
        return [t.name for t in self.tasks if not plays(t.name)]
