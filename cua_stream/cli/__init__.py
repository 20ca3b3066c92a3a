"""The ``cua-stream`` command line: one Typer sub-app (or command) per noun. CLI modules wire, they do
not decide: each builds its daemon's config and hands it to library code."""

from __future__ import annotations

import importlib
import logging
import sys

import typer
from typer._click import exceptions as clicks  # typer 0.29 vendors click: its errors are these
from typer.core import TyperGroup

from cua_stream.config import apply_offline_defaults, log_level


class _ByJob(TyperGroup):
    """Lists the commands in ``SUBCOMMANDS``' order (typer lists the sub-apps after the commands)."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        order = list(SUBCOMMANDS)
        return sorted(super().list_commands(ctx), key=lambda n: order.index(n) if n in order else len(order))


app = typer.Typer(
    cls=_ByJob,
    name="cua-stream",
    help="Stream computer-use RL episodes through Kafka. Start with `cua-stream demo`; docs/ has the guides.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root() -> None:
    """Stream computer-use RL episodes through Kafka. Start with `cua-stream demo`; docs/ has the guides."""
    # A callback keeps the app a command group even when only one subcommand is registered.


# name -> "module:attr" of a Typer sub-app, or of a command function (registered under ``name``).
# Imported lazily so `cua-stream tap` does not pay for torch or Harbor. In the order `--help` lists them.
SUBCOMMANDS: dict[str, str] = {
    "demo": "cua_stream.cli.demo:demo",
    "learn": "cua_stream.cli.learn:learn",
    "eval": "cua_stream.cli.eval:app",
    "record-oracle": "cua_stream.cli.record_oracle:record_oracle",
    "sft": "cua_stream.cli.sft:sft",
    "launch": "cua_stream.cli.launch:launch",
    "trainer": "cua_stream.cli.trainer:trainer",
    "producer": "cua_stream.cli.producer:producer",
    "scorer": "cua_stream.cli.scorer:scorer",
    "gateway": "cua_stream.cli.gateway:gateway",
    "engine": "cua_stream.cli.engine:engine",
    "dashboard": "cua_stream.cli.dashboard:dashboard",
    "policies": "cua_stream.cli.policies:policies",
    "tap": "cua_stream.cli.tap:tap",
    "inspect": "cua_stream.cli.inspect:app",
    "replay": "cua_stream.cli.replay:replay",
    "runs": "cua_stream.cli.runs:app",
    "retrain": "cua_stream.cli.retrain:retrain",
    "export-metrics": "cua_stream.cli.export_metrics:export_metrics",
    "plan": "cua_stream.cli.plan:plan_command",
    "broker": "cua_stream.cli.broker:app",
    "topics": "cua_stream.cli.topics:app",
    "acl": "cua_stream.cli.acl:app",
    "containers": "cua_stream.cli.containers:app",
    "desktop": "cua_stream.cli.desktop:app",
    "tasks": "cua_stream.cli.tasks:app",
    "make-tiny-model": "cua_stream.cli.tiny_model:make_tiny_model",
    "chaos": "cua_stream.cli.chaos:chaos",
}

PANELS: dict[str, tuple[str, ...]] = {
    "Start here": ("demo", "learn", "eval", "record-oracle", "sft", "launch"),
    "Daemons": ("trainer", "producer", "scorer", "gateway", "engine", "dashboard", "policies"),
    "Observe and debug": ("tap", "inspect", "replay", "runs", "retrain", "export-metrics"),
    "Plan": ("plan",),
    "Operate": ("broker", "topics", "acl", "containers", "desktop", "tasks", "make-tiny-model", "chaos"),
}
"""The headings `cua-stream --help` groups the commands under, by the job a reader comes with: the
one-machine jobs first, then the daemons a deployment runs, then the tools."""
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}


def _register(argv: list[str]) -> None:
    # Import only the module of the command being run (all of them for --help), so a light command
    # never pays for torch, transformers or Harbor.
    wanted = [argv[0]] if argv and argv[0] in SUBCOMMANDS else list(SUBCOMMANDS)
    for name in wanted:
        target = SUBCOMMANDS[name]
        module_name, attr = target.split(":")
        obj = getattr(importlib.import_module(module_name), attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name, rich_help_panel=PANEL_OF[name])
        else:
            app.command(name, rich_help_panel=PANEL_OF[name])(obj)


def full_app() -> typer.Typer:
    """The app with every command registered (as for ``--help``): what the CLI reference documents.
    Registers once per process."""
    if not app.registered_commands and not app.registered_groups:
        _register([])
    return app


def main() -> None:
    logging.basicConfig(level=log_level(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # aiokafka logs transient metadata races (e.g. right after topic creation) as errors; its real
    # failures surface as exceptions.
    logging.getLogger("aiokafka").setLevel(max(log_level(), logging.CRITICAL))
    apply_offline_defaults()  # before any command imports Harbor (and with it LiteLLM)
    _register(sys.argv[1:])
    sys.exit(_run())


def _run() -> int:
    """The command's exit code. A usage error (a bad option or value) is one line on stderr and exit 2,
    as the commands' own errors are (``friendly_errors``), not click's boxed usage screen: a script or
    a log reads it in one line."""
    try:
        code = app(standalone_mode=False)
    except clicks.NoArgsIsHelpError as error:  # the help was printed: nothing to add
        return error.exit_code
    except clicks.UsageError as error:
        where = error.ctx.command_path if error.ctx else "cua-stream"
        print(f"error: {where}: {error.format_message()} (see {where} --help)", file=sys.stderr)
        return error.exit_code
    except clicks.ClickException as error:  # click's other errors (a file option it could not open)
        print(f"error: {error.format_message()}", file=sys.stderr)
        return error.exit_code
    except typer.Abort:  # end of input at a prompt, as click's standalone mode says it
        print("Aborted!", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0
