"""The shell commands of the docs, checked against the code so a guide cannot rot.

Every line of a ``bash``/``sh`` fenced block in the pages (``PAGES``) is read as the shell reads it: a
trailing ``\\`` continues the line, ``#`` starts a comment, ``;``/``&&``/``||``/``|`` separate commands,
``VAR=value`` prefixes and ``for``/``do``/``done`` are the shell's, and ``eval "$(...)"`` runs the command
inside. Each ``cua-stream`` command is parsed against the real click command (its path resolved, its
options and arguments given to ``make_context``, nothing invoked): an unknown command or option, a
missing or bad value, or an old spelling a group still takes (``cli._eval_spellings``), is a problem naming
``file:line``. Any other command has its repo paths checked
(``bash scripts/x.sh``, ``docker compose -f compose/y.yml``): a path that is not there is a problem.

What happens to each command besides (``how_checked``): those in ``RUN`` are run by
``tests/unit/test_docs_commands.py``; those ``RUN_BY`` names are what an existing test runs; the rest is
checked for syntax only, as are blocks after ``<!-- needs: gpu -->`` or ``<!-- needs: cloud -->``.
Pure but for ``page_commands`` (reads a page) and ``check`` (looks at the repo's files).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAGES = ("README.md", "docs/*.md", "docs/tutorials/*.md", "docs/how-to/*.md")
SHELL = frozenset({"bash", "sh", "shell", "console"})
NEEDS = re.compile(r"<!--\s*needs:\s*([a-z, ]+?)\s*-->")
"""A block a test cannot run here: ``<!-- needs: gpu -->`` or ``cloud``, on the line before its fence."""
KNOWN_NEEDS = frozenset({"gpu", "cloud"})
CLI = frozenset({"cua-stream", ".venv/bin/cua-stream"})
SEPARATORS = frozenset({";", "&&", "||", "|", "&"})
KEYWORDS = frozenset({"do", "then", "else", "!"})
"""Words that open a command without being it (``...; do cua-stream ...``)."""
SKIPPED = frozenset({"for", "while", "if", "done", "fi", "esac"})
"""Commands that are the shell's own control flow (``for t in a b``): nothing to check."""
REPO_DIRS = ("scripts/", "bench/", "tests/", "compose/", "docs/", "cua_stream/", "consumers/", "producers/")

RUN: tuple[tuple[str, ...], ...] = (
    ("cua-stream", "make-tiny-model"),
    ("cua-stream", "launch"),
)
"""Commands that need nothing but the CLI (and the files the commands before them on their page wrote):
``tests/unit/test_docs_commands.py`` runs each one found in a tutorial or how-to, in order, in a scratch
directory per page. A command that ends in ``--help`` is run too."""

RUN_BY: dict[tuple[str, ...], str] = {
    ("cua-stream", "broker"): "tests/integration/test_broker.py",
    ("cua-stream", "topics", "create"): "tests/integration/test_broker.py",
    ("cua-stream", "engine"): "tests/integration/gateway_servers.py",
    ("cua-stream", "gateway"): "tests/integration/test_gateway_engine.py",
    ("cua-stream", "scorer"): "tests/integration/test_scorer.py",
    ("cua-stream", "producer"): "tests/containers/test_docker_episodes.py",
    ("cua-stream", "trainer"): "tests/integration/test_chaos.py",
    ("cua-stream", "chaos"): "tests/integration/test_chaos.py",
    ("cua-stream", "tap"): "tests/integration/test_replay_tap.py",
    ("cua-stream", "replay"): "tests/integration/test_replay_tap.py",
    ("cua-stream", "dashboard"): "tests/integration/test_dashboard.py",
    ("cua-stream", "eval"): "tests/integration/test_eval.py",
    ("cua-stream", "eval", "table"): "tests/unit/test_benchmark_table.py",
    ("cua-stream", "inspect"): "tests/integration/test_inspect_step.py",
    ("cua-stream", "export-metrics"): "tests/integration/test_export_metrics.py",
    ("cua-stream", "retrain"): "tests/integration/test_retrain.py",
    ("cua-stream", "runs", "compare"): "tests/integration/test_retrain.py",
    ("cua-stream", "learn"): "tests/e2e/test_learn.py",
    ("cua-stream", "demo"): "tests/e2e/test_demo.py",
    ("cua-stream", "containers", "local-env"): "tests/integration/test_broker.py",
    ("bash", "scripts/gpu-check.sh", "--dry-run"): "tests/e2e/test_gpu_check.py",
    ("docker", "compose"): "tests/containers/test_compose_up.py",
}
"""Commands that need a broker, a desktop or Docker, by the test that runs them already (the longest
prefix wins): the docs are not the place to run them twice. "Run by" names the command, not every
option a page gives it. The test file must name the command's words (``tests/unit/test_docs_commands.py``)."""


@dataclass(frozen=True)
class DocCommand:
    """One command of a page: where it is (``file:line``), its words, and what its block needs."""

    where: str
    argv: tuple[str, ...]
    needs: frozenset[str] = frozenset()

    @property
    def words(self) -> tuple[str, ...]:
        """``argv`` with the program's spelling made plain (``.venv/bin/cua-stream`` is ``cua-stream``)."""
        program = self.argv[0].removeprefix(".venv/bin/")
        return ("python" if program == "python3" else program, *self.argv[1:])


def shell_blocks(text: str) -> Iterator[tuple[int, frozenset[str], list[tuple[int, str]]]]:
    """Each shell fenced block: its fence's line, what it needs, its (line number, text) lines."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"\s*(```+|~~~+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence[1])), len(lines))
        if fence[2] in SHELL:
            before = lines[i - 1] if i else ""
            marked = NEEDS.search(before)
            needs = frozenset(n.strip() for n in marked[1].split(",")) if marked else frozenset()
            yield i + 1, needs, [(n + 1, lines[n]) for n in range(i + 1, end)]
        i = end + 1


def logical_lines(block: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Lines with their ``\\`` continuations joined and comments cut, numbered by their first line."""
    start, parts = 0, []
    for number, line in block:
        start = start or number
        text = _cut_comment(line)
        if text.rstrip().endswith("\\"):
            parts.append(text.rstrip()[:-1])
            continue
        parts.append(text)
        joined = " ".join(p.strip() for p in parts).strip()
        if joined:
            yield start, joined
        start, parts = 0, []


def commands_of(line: str) -> list[list[str]]:
    """The commands one shell line runs, each as its words (a command substitution's too)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, ""
    found: list[list[str]] = []
    current: list[str] = []
    for token in [*lexer, ";"]:
        if token not in SEPARATORS:
            current.append(token)
            continue
        while current and (current[0] in KEYWORDS or re.fullmatch(r"[A-Za-z_]\w*=.*", current[0])):
            current.pop(0)  # `do`, `VAR=value`: the command follows
        for word in current:
            if inner := re.fullmatch(r"\$\((.*)\)", word, re.DOTALL):
                found += commands_of(inner[1])
        if current and current[0] not in SKIPPED and current[0] != "eval":
            found.append(current)
        current = []
    return found


def page_commands(path: Path, rel: str) -> list[DocCommand]:
    """Every command in the shell blocks of the page at ``path`` (named ``rel`` in what it reports)."""
    out = []
    for _, needs, block in shell_blocks(path.read_text()):
        for number, line in logical_lines(block):
            out += [DocCommand(f"{rel}:{number}", tuple(argv), needs) for argv in commands_of(line)]
    return out


def check(command: DocCommand, root: Any, repo: Path) -> str | None:
    """What is wrong with ``command`` (a line naming ``file:line``), or None. ``root``: the click group
    of ``cua-stream`` (``typer.main.get_command(cli.full_app())``)."""
    words = command.words
    unknown = command.needs - KNOWN_NEEDS
    if unknown:
        return f"{command.where}: unknown need {sorted(unknown)} (known: {sorted(KNOWN_NEEDS)})"
    problem = parse_cli(words[1:], root) if command.argv[0] in CLI else _missing_path(words, repo)
    return f"{command.where}: {problem}" if problem else None


def parse_cli(args: tuple[str, ...], root: Any) -> str | None:
    """Why ``cua-stream ARGS`` would not parse (the command resolved, its parameters read, nothing run)."""
    from typer._click import exceptions as clicks
    from typer.exceptions import Exit

    from cua_stream.cli._eval_spellings import OLD_SPELLING

    group, path, rest = root, ["cua-stream"], list(args)
    while hasattr(group, "list_commands") and rest and not rest[0].startswith("-"):
        sub = group.get_command(None, rest[0])
        if sub is None:
            return f"unknown command {' '.join([*path, rest[0]])!r}"
        group, path, rest = sub, [*path, rest.pop(0)], rest
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help prints the help, then exits
            ctx = group.make_context(" ".join(path), rest)
    except (Exit, clicks.NoArgsIsHelpError):
        return None
    except clicks.UsageError as error:
        return f"{' '.join(path)}: {error.format_message()}"
    if (respelled := ctx.meta.get(OLD_SPELLING)) is not None:  # it runs, but a page teaches the new one
        return f"{' '.join(path)}: an old spelling; write {' '.join(path)} {shlex.join(respelled)}"
    return None


def how_checked(command: DocCommand) -> str:
    """``run`` (a test runs it from the page), ``run by <test file>``, or ``syntax`` (parsed only)."""
    words = command.words
    runnable = command.where.startswith(("docs/tutorials/", "docs/how-to/"))
    if runnable and not command.needs and (words[-1] == "--help" or any(_starts(words, p) for p in RUN)):
        return "run"
    matches = [p for p in RUN_BY if _starts(words, p)]
    if matches:
        return f"run by {RUN_BY[max(matches, key=len)]}"
    return "syntax"


def _starts(words: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return words[: len(prefix)] == prefix


def _missing_path(words: tuple[str, ...], repo: Path) -> str | None:
    """The first repo path a non-CLI command names that is not in the repo (``x.py::test`` counts x.py)."""
    for word in words:
        path = word.split("::")[0]
        if path.startswith(REPO_DIRS) and not any(c in path for c in "*?<[$") and not (repo / path).exists():
            return f"{path} does not exist"
    return None


def _cut_comment(line: str) -> str:
    """``line`` up to a ``#`` that starts a shell comment (at a word's start, outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line
