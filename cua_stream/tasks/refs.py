"""What names a task: a bundled task's name, a MiniWoB++ task's (``miniwob/<name>``), or any Harbor task
directory (a user's own computer-1 tasks run unchanged), and the globs, suites and dataset directories the
CLI takes for them."""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path

from cua_stream.events import TaskRef
from cua_stream.tasks import TASKS
from cua_stream.tasks.miniwob import SUITE, is_miniwob


def task_ref(spec: str) -> TaskRef:
    """The task ``spec`` names: a Harbor task directory (one holding ``task.toml``; named by the
    directory, or ``miniwob/<name>`` for one exported from MiniWoB++, whose version must be the installed
    one), else a task name the producers resolve (a bundled task's, a MiniWoB++ task's, which must be one
    of the suite, or a task of their own environment: the trainer may issue work for tasks it has no
    copy of). A directory without a ``task.toml`` is a ValueError."""
    path = Path(spec).expanduser()
    if (path / "task.toml").is_file():
        from cua_stream.tasks.miniwob.export import check_exported

        return TaskRef(name=check_exported(path) or path.name, path=str(path.resolve()))
    if path.is_dir():
        raise ValueError(f"{spec} is a directory without a task.toml: not a Harbor task")
    if is_miniwob(spec):
        (name,) = _suite_names(spec)  # a glob here is a name no task has
        return TaskRef(name=name)
    return TaskRef(name=spec.removeprefix("cua/") if spec.removeprefix("cua/") in TASKS else spec)


def expand_tasks(specs: Iterable[str]) -> list[str]:
    """``specs`` with globs expanded (``my-tasks/*``), each dataset directory (one whose subdirectories
    are tasks) replaced by its tasks, in name order, and ``miniwob`` / ``miniwob/<glob>`` by the MiniWoB++
    tasks they name (unless a path of that name exists); other names pass through."""
    out: list[str] = []
    for spec in specs:
        if _names_suite(spec) and not Path(spec).exists():
            out.extend(_suite_names(spec))
            continue
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


def _names_suite(spec: str) -> bool:
    return spec == SUITE or is_miniwob(spec)


def _suite_names(spec: str) -> list[str]:
    from cua_stream.tasks.miniwob.names import names_of
    from cua_stream.tasks.miniwob.suite import installed_suite

    return names_of(spec, installed_suite())
