"""Shared CLI plumbing: options that build the BusConfig, the tasks and episode environment a one-shot
command is given (parsed and checked, each bad value named), and turning errors into clear exits."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.markup import escape

from cua_stream.cli.defaults import field_option
from cua_stream.config import BusConfig, ConfigError, bus_config, read_file
from cua_stream.errors import CuaError

err = Console(stderr=True)

Bootstrap = Annotated[
    str | None,
    field_option(
        "bus",
        "bootstrap_servers",
        "--bootstrap",
        "-b",
        help="Kafka host:port list (env CUA_BOOTSTRAP_SERVERS).",
    ),
]
Prefix = Annotated[
    str | None,
    field_option("bus", "topic_prefix", "--prefix", help="Topic namespace (env CUA_TOPIC_PREFIX)."),
]
ConfigFile = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML/YAML config file; sections per daemon.")
]


def load_file(path: Path | None) -> dict[str, Any]:
    return read_file(path) if path is not None else {}


def make_bus(bootstrap: str | None, prefix: str | None, config_file: Path | None) -> BusConfig:
    return bus_config({"bootstrap_servers": bootstrap, "topic_prefix": prefix}, load_file(config_file))


def output_problem(path: Path, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot take a command's output: a file, or with ``directory`` a folder of them (made
    if missing); None when it can. Checked at start, before any work (an evaluation given a directory
    for its results file once ran every episode, then failed to write them). The folder above must exist
    already: a mistyped path is refused, not created."""
    wanted, other = ("a directory", "a file") if directory else ("a file", "a directory")
    if path.exists() and path.is_dir() != directory:
        return f"{path} is {other}, not {wanted}"
    parent = path.parent
    if not parent.is_dir():
        return f"{parent} is not a directory" if parent.exists() else f"{parent} does not exist"
    if not os.access(path if path.exists() else parent, os.W_OK):
        return f"{path if path.exists() else parent} is not writable"
    return None


EpisodeEnvironment = Annotated[
    str,
    typer.Option(
        "--environment",
        help="local-desktop (Harbor trials in namespaces; root), docker (Harbor's docker environment on "
        "cua-stream's own daemon: `cua-stream containers start --build`, then `eval \"$(cua-stream "
        'containers env)"`), any other Harbor environment type, or scripted (no desktop).',
    ),
]
"""Where a one-shot command's episodes run (``episode_producer``): the producer's environments."""


def parse_tasks(tasks: str, *, hint: str = "--tasks") -> list[str]:
    """``--tasks``: comma-separated bundled task names, or ``all``; ``miniwob`` (the MiniWoB++ suite),
    MiniWoB++ task names and globs of them (``miniwob/click-*``)."""
    from cua_stream.tasks import TASKS
    from cua_stream.tasks.miniwob import SUITE, is_miniwob
    from cua_stream.tasks.refs import expand_tasks

    chosen: list[str] = []
    for task in list(TASKS) if tasks == "all" else [t.strip() for t in tasks.split(",") if t.strip()]:
        if task == SUITE or is_miniwob(task):
            try:
                chosen += expand_tasks([task])
            except ValueError as e:
                raise typer.BadParameter(str(e), param_hint=hint) from None
        else:
            chosen.append(task)
    unknown = [t for t in chosen if t not in TASKS and not is_miniwob(t)]
    if unknown or not chosen:
        raise typer.BadParameter(f"unknown tasks {unknown}; known: {', '.join(TASKS)}, miniwob/<name>",
                                 param_hint=hint)  # fmt: skip
    return list(dict.fromkeys(chosen))


def require_playable(policy: str, tasks: list[str], hint: str) -> list[str]:
    """``tasks``, when the scripted ``policy`` plays each (the oracle: the teacher ``record-oracle`` and
    ``learn`` demonstrate with); else one line naming those it does not play."""
    from cua_stream.tasks.policy_server import PLAYS, plays

    unplayable = [t for t in tasks if not plays(policy, t)]
    if unplayable:
        names = f"{', '.join(unplayable[:5])}{' ...' if len(unplayable) > 5 else ''}"
        raise typer.BadParameter(
            f"the scripted policy {policy} does not play {names} ({PLAYS})", param_hint=hint
        )
    return tasks


PER_CALL_LOGGERS = ("httpx", "LiteLLM")
"""Libraries that log every request at INFO (a line per HTTP call, two per LLM call): shown at DEBUG only."""


def set_log_level(level: str) -> None:
    """Set the root logger's level (``main`` has configured logging already, so ``basicConfig`` would
    be a no-op); a bad name is a ConfigError naming it. Per-call library chatter stays off above DEBUG."""
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ConfigError(f"--log-level: unknown level {level!r} (debug, info, warning, error)")
    logging.getLogger().setLevel(value)
    for name in PER_CALL_LOGGERS:
        logging.getLogger(name).setLevel(value if value <= logging.DEBUG else max(value, logging.WARNING))


def friendly_errors[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """Config and operational errors end the command with a one-line message and exit code 2 (the
    message is printed as text: square brackets in it are not markup)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (*_EXPECTED, BaseExceptionGroup) as e:
            cause = _only_cause(e)
            if not isinstance(cause, _EXPECTED):
                raise
            err.print(  # unwrapped: one line whatever the terminal's width (a log, a pipe: 80)
                f"[red]error:[/red] {escape(str(cause) or type(cause).__name__)}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2) from None

    return wrapper


_EXPECTED = (ConfigError, CuaError, LookupError, ValueError, KafkaError)
"""Errors a user can act on from a one-line message; anything else is a bug and keeps its traceback."""


def _only_cause(error: BaseException) -> BaseException:
    """The single error inside (nested) task-group exception groups, or the group itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
