"""`cua-stream launch`: a preset's resolved configuration of every daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cua_stream.cli.common import ConfigFile, friendly_errors, load_file


@friendly_errors
def launch(
    preset_name: Annotated[
        str, typer.Option("--preset", help="default | session-qwen3vl | local-demo")
    ] = "default",
    show: Annotated[bool, typer.Option("--print", help="Print the resolved configuration (YAML).")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of YAML.")] = False,
    model_path: Annotated[
        str, typer.Option(help="The model directory every daemon uses (checked when it is on this machine).")
    ] = "",
    write: Annotated[
        Path | None, typer.Option(help="Also write it as a config file the daemons' --config reads.")
    ] = None,
    config: ConfigFile = None,
) -> None:
    """Resolve a launch preset (each daemon's defaults < the preset < --config) and show every daemon's
    settings, with the same run in the source launcher's flags (``launch.miles_argv``).

    Example: cua-stream launch --preset local-demo --model-path models/tiny --write run.toml"""
    import msgspec
    import yaml

    from cua_stream.app.launch import preset, redacted, resolve

    resolved = redacted(
        msgspec.to_builtins(resolve(preset(preset_name), load_file(config), model_path=model_path))
    )
    text = json.dumps(resolved, indent=2) if as_json else yaml.safe_dump(resolved, sort_keys=False)
    if show:
        print(text, end="" if text.endswith("\n") else "\n")
    if write is not None:
        daemons = {k: v for k, v in resolved.items() if k != "launch"}
        write.write_text(yaml.safe_dump(daemons, sort_keys=False))
