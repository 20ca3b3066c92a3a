"""`cua-stream record-oracle`: demonstrations recorded through the path GRPO trains on; its options
checked here, the recording itself is ``cua_stream.app.record_oracle``. ``cua-stream sft`` then trains on
the rewarded ones only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cua_stream.app.record_oracle import record_oracle as record
from cua_stream.cli.common import (
    ConfigFile,
    EpisodeEnvironment,
    friendly_errors,
    load_file,
    parse_tasks,
    require_playable,
)


@friendly_errors
def record_oracle(
    seeds: Annotated[int, typer.Option(help="Layout seeds per task (one episode each).")] = 2,
    first_seed: Annotated[int, typer.Option(help="The first layout seed (seeds are consecutive).")] = 1,
    tasks: Annotated[
        str, typer.Option(help="Comma-separated bundled tasks, or 'all' (the oracle plays those).")
    ] = "all",
    turns: Annotated[int, typer.Option(help="computer-1's turn limit per episode.")] = 10,
    concurrency: Annotated[int, typer.Option(help="Episodes (desktops) at once.")] = 2,
    environment: EpisodeEnvironment = "local-desktop",
    model_path: Annotated[
        Path | None, typer.Option(help="The policy (saved Qwen3-VL); default: the demo's tiny model.")
    ] = None,
    run_id: Annotated[str, typer.Option(help="The demonstrations' run id (default: oracle-<time>).")] = "",
    engine_port: Annotated[int, typer.Option(help="Reference engine port.")] = 30000,
    gateway_port: Annotated[int, typer.Option(help="Session gateway port.")] = 8000,
    policies_port: Annotated[int, typer.Option(help="Scripted-policy server port (the teacher).")] = 8090,
    config: ConfigFile = None,
) -> None:
    """Record oracle demonstrations of the bundled tasks as forced completions through the gateway and
    engine; score them with the real verifiers; print what was recorded and the `sft` command.

    Example: cua-stream record-oracle --tasks click-button --seeds 4 --run-id demos-1"""
    chosen = require_playable("oracle", parse_tasks(tasks), "--tasks")
    if seeds < 1:
        raise typer.BadParameter("at least 1", param_hint="--seeds")
    record(chosen, load_file(config), run_id=run_id, seeds=seeds, first_seed=first_seed,
           model_path=model_path, environment=environment, turns=turns, concurrency=concurrency,
           engine_port=engine_port, gateway_port=gateway_port, policies_port=policies_port)  # fmt: skip
