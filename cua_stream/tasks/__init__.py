"""The bundled computer-1 tasks (Harbor task directories under ``bundled/``), their seeded pages, server,
verifier and scripted policies. This package's server, ready probe and verifier run inside episode
containers on Debian's Python: standard library only (``cua_stream.tasks.refs`` names tasks for the
daemons)."""

from __future__ import annotations

from pathlib import Path

from cua_stream.tasks.pages import TASKS

BUNDLED_DIR = Path(__file__).parent / "bundled"


def task_dir(name: str) -> Path:
    """The Harbor task directory of bundled task ``name`` (``cua/`` prefix optional)."""
    short = name.removeprefix("cua/")
    if short not in TASKS:
        raise ValueError(f"unknown bundled task {name!r}; known: {', '.join(TASKS)}")
    return BUNDLED_DIR / short


__all__ = ["BUNDLED_DIR", "TASKS", "task_dir"]
