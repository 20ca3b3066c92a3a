"""The house's rules, read from the source (every module parsed, nothing imported): the stages stay apart
(producers and consumers never import each other; the library imports neither, only the application
that wires them does: ``cua_stream/app/`` and the CLI above it), nothing below the application imports
it, tests import public modules only, and ``cua_stream.config`` is the one reader of the process
environment."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPLICATION = ("cua_stream/cli/", "cua_stream/app/")
"""The folders that wire the stages together (the application, and the CLI that parses arguments and calls
it): they may import every stage, and nothing else may import them."""
ENTRY_POINTS = ("cua_stream/__main__.py", "cua_stream/docs_reference.py", "cua_stream/docs_commands.py")
"""Modules beside the application that start or document the CLI (``python -m cua_stream``, the generated
reference and the commands' check): they read the CLI, nothing imports them."""
IN_EPISODE = ("cua_stream/tasks/verify.py", "cua_stream/tasks/ready.py", "cua_stream/tasks/server.py")
"""Programs run inside an episode's environment, from its environment (standard library only)."""


def modules(*packages: str) -> Iterator[tuple[str, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(), rel)


def imported_modules(tree: ast.Module) -> set[str]:
    """Dotted module names a module imports (at any depth in it), ``from a import b`` as ``a.b`` too."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


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


def test_nothing_below_the_application_imports_it() -> None:
    """The application (``cua_stream/app/``) and the CLI sit on top: no stage, no library module imports
    either (only the entry points that start or document the CLI read it)."""
    found, checked = [], 0
    for rel, tree in modules("producers", "consumers", "cua_stream"):
        if rel.startswith(APPLICATION) or rel in ENTRY_POINTS:
            continue
        checked += 1
        found += [
            f"{rel} imports {name}"
            for name in sorted(imported_modules(tree))
            if name.startswith(("cua_stream.app", "cua_stream.cli")) and name.split(".")[1] in ("app", "cli")
        ]
    assert checked > 100 and found == []


def test_tests_import_public_modules_only() -> None:
    """A test imports what a user of the package can: no module path with a ``_private`` part (what a test
    needs is public, or tested through the public command). Names from a module are not paths."""
    found, checked = [], 0
    for rel, tree in modules("tests"):
        checked += 1
        found += [f"{rel} imports {path}" for path in module_paths(tree) if _private(path)]
    assert checked > 100 and found == []


def module_paths(tree: ast.Module) -> set[str]:
    """The project's module paths a module imports: ``import a.b``, ``from a.b import c`` (``a.b``, and
    ``a.b.c`` where ``c`` is a module of the tree)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            base = ROOT.joinpath(*node.module.split("."))
            out |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if (base / f"{a.name}.py").is_file() or (base / a.name).is_dir()
            }
    return {p for p in out if p.split(".")[0] in ("cua_stream", "producers", "consumers")}


def _private(path: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in path.split("."))


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
