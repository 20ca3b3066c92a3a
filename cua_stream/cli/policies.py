"""`cua-stream policies`: the scripted policies (oracle: the bundled tasks' oracle and the MiniWoB++ teacher;
nothing, idle, random) behind an OpenAI-compatible endpoint — a teacher for ``record-oracle``, or a model
for any computer-1 run."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cua_stream.cli.common import friendly_errors


@friendly_errors
def policies(
    host: Annotated[str, typer.Option(help="Listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8090,
) -> None:
    """Serve POST /policies/{oracle|nothing|idle|random}/{task}/{seed}/v1/chat/completions and GET
    /health.

    Example: cua-stream policies --port 8090"""
    import uvicorn

    from cua_stream.tasks.policy_server import create_app

    if not 0 < port < 65536:
        raise typer.BadParameter(f"{port} is not a TCP port", param_hint="--port")
    print(f"scripted policies on http://{host}:{port}/policies", file=sys.stderr, flush=True)
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")
