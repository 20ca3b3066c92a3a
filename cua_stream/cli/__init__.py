"""The ``cua-stream`` command line: one Typer sub-app (or command) per noun. CLI modules wire, they do
not decide: each builds its daemon's config and hands it to library code."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="cua-stream",
    help="Stream computer-use RL episodes through Kafka: broker, topics, replay, tap, and the daemons.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

# name -> "module:attr" of a Typer sub-app, or of a command function (registered under ``name``).
# Imported lazily so `cua-stream tap` does not pay for torch or Harbor.
SUBCOMMANDS: dict[str, str] = {}


def _register() -> None:
    for name, target in SUBCOMMANDS.items():
        module_name, attr = target.split(":")
        obj = getattr(importlib.import_module(module_name), attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)


def main() -> None:
    _register()
    app()
