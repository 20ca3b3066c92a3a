"""What names a task: a bundled task's name, or any Harbor task directory (a user's own computer-1 tasks
run unchanged), and the globs and dataset directories the CLI takes for them."""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path

from cua_stream.events import TaskRef
from cua_stream.tasks import TASKS


def task_ref(spec: str) -> TaskRef:
    """The task ``spec`` names: a Harbor task directory (one holding ``task.toml``; named by the
    directory), else a task name the producers resolve (a bundled task's, or a task of their own
    environment: the trainer may issue work for tasks it has no copy of). A directory without a
    ``task.toml`` is a ValueError."""
    path = Path(spec).expanduser()
    if (path / "task.toml").is_file():
        return TaskRef(name=path.name, path=str(path.resolve()))
    if path.is_dir():
        raise ValueError(f"{spec} is a directory without a task.toml: not a Harbor task")
    return TaskRef(name=spec.removeprefix("cua/") if spec.removeprefix("cua/") in TASKS else spec)


def expand_tasks(specs: Iterable[str]) -> list[str]:
    """``specs`` with globs expanded (``my-tasks/*``) and each dataset directory (one whose
    subdirectories are tasks) replaced by its tasks, in name order; names pass through."""
    out: list[str] = []
    for spec in specs:
        matches = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
        if not matches:
            raise ValueError(f"{spec} matches no task directory")
        for match in matches:
            path = Path(match)
            if path.is_dir() and not (path / "task.toml").is_file():
                children = sorted(str(c) for c in path.iterdir() if (c / "task.toml").is_file())
                out.extend(children or [match])  # no tasks inside: task_ref says why
            else:
                out.append(match)
    return out
