"""The house's rules, read from the source (every module parsed, nothing imported): the stages stay apart
(producers and consumers never import each other; the library imports neither, only the application
modules that wire them do), and ``cua_stream.config`` is the one reader of the process environment."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPLICATION = ("cua_stream/cli/", "cua_stream/chaos/", "cua_stream/launch.py", "cua_stream/demo.py",
               "cua_stream/learn.py", "cua_stream/rollouts.py", "cua_stream/evaluate.py")  # fmt: skip
"""Modules that wire the stages together (commands, presets, the demo, a producer and scorer run in the
command's process, an evaluation's episodes): they may import every stage."""
IN_EPISODE = ("cua_stream/tasks/verify.py", "cua_stream/tasks/ready.py", "cua_stream/tasks/server.py")
"""Programs run inside an episode's environment, from its environment (standard library only)."""


def modules(*packages: str) -> Iterator[tuple[str, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(), rel)


def imported(tree: ast.Module) -> set[str]:
    """Top-level package names a module imports (at any depth in it: lazy imports count)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_the_stages_never_import_each_other_and_the_library_imports_no_stage() -> None:
    found = []
    for rel, tree in modules("producers", "consumers", "cua_stream"):
        names = imported(tree)
        if rel.startswith("producers/") and "consumers" in names:
            found.append(f"{rel} imports consumers")
        if rel.startswith("consumers/") and "producers" in names:
            found.append(f"{rel} imports producers")
        if (
            rel.startswith("cua_stream/")
            and not rel.startswith(APPLICATION)
            and names & {"producers", "consumers"}
        ):
            found.append(f"{rel} (library) imports {sorted(names & {'producers', 'consumers'})}")
    assert found == []


def test_only_the_config_module_reads_the_environment() -> None:
    found = []
    for rel, tree in modules("producers", "consumers", "cua_stream"):
        if rel in ("cua_stream/config.py", *IN_EPISODE):
            continue
        for node in ast.walk(tree):
            attr = node.attr if isinstance(node, ast.Attribute) else None
            if (
                attr in ("environ", "getenv", "putenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):  # type: ignore[union-attr]
                found.append(f"{rel}:{node.lineno} os.{attr}")
    assert found == []
