"""Shared CLI plumbing: options that build the BusConfig, and turning errors into clear exits."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from cua_stream.config import BusConfig, ConfigError, bus_config, read_file
from cua_stream.errors import CuaError

err = Console(stderr=True)

Bootstrap = Annotated[
    str | None, typer.Option("--bootstrap", "-b", help="Kafka host:port list (env CUA_BOOTSTRAP_SERVERS).")
]
Prefix = Annotated[str | None, typer.Option("--prefix", help="Topic namespace (env CUA_TOPIC_PREFIX).")]
ConfigFile = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML/YAML config file; sections per daemon.")
]


def load_file(path: Path | None) -> dict[str, Any]:
    return read_file(path) if path is not None else {}


def make_bus(bootstrap: str | None, prefix: str | None, config_file: Path | None) -> BusConfig:
    return bus_config({"bootstrap_servers": bootstrap, "topic_prefix": prefix}, load_file(config_file))


def friendly_errors[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """Config and operational errors end the command with a one-line message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, CuaError, LookupError, ValueError) as e:
            err.print(f"[red]error:[/red] {e}", highlight=False)
            raise typer.Exit(2) from None

    return wrapper
