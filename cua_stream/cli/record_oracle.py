"""`cua-stream record-oracle`: demonstrations recorded through the path GRPO trains on.

The bundled tasks' oracle plays real computer-1 trials (the local desktop, Docker, or the scripted environment),
but its replies do not go straight to the agent: the gateway asks the oracle (its ``teacher_url``: the
scripted-policy server) and has the engine score the reply as the policy's completion, so every turn
lands on the turn topic with the chat template, token layout and images a sampled turn has, plus the
policy's logprob of it. The scorer's real verifiers judge each episode; ``cua-stream sft`` then trains
on the rewarded ones only.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import msgspec
import typer
from rich.table import Table

from cua_stream.cli._common import ConfigFile, friendly_errors, load_file
from cua_stream.cli._stack import (
    EpisodeEnvironment,
    Steps,
    broker_and_topics,
    episode_producer,
    out,
    parse_tasks,
    require_playable,
    teacher_stack,
)
from cua_stream.config import state_dir
from cua_stream.rollouts import run_episodes

if TYPE_CHECKING:
    from cua_stream.events import ScoreEvent, WorkRequest


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
    from consumers.trainer.stream.feeder import demonstration_work
    from cua_stream.demo import tiny_model_dir

    chosen = require_playable("oracle", parse_tasks(tasks), "--tasks")
    if seeds < 1:
        raise typer.BadParameter("at least 1", param_hint="--seeds")
    file_data = load_file(config)
    producer = episode_producer(
        file_data,
        concurrency=concurrency,
        turns=turns,
        environment=environment,
        gateway_port=gateway_port,
        trials="oracle-trials",
    )
    run = run_id or f"oracle-{time.strftime('%Y%m%d-%H%M%S')}"
    step = Steps(5)
    _, bus = broker_and_topics(file_data, step)
    producer = msgspec.structs.replace(producer, bus=bus)
    step("the policy")
    model = model_path or tiny_model_dir()
    out.print(f"    {model}")
    logs = state_dir() / "oracle-logs"
    step(f"starting the oracle (the teacher), the engine and the gateway (logs in {logs})")
    with teacher_stack(model, bus, engine_port=engine_port, gateway_port=gateway_port,
                       policies_port=policies_port, logs=logs):  # fmt: skip
        step(
            f"recording {len(chosen) * seeds} demonstration(s): {', '.join(chosen)} x seeds "
            f"{first_seed}..{first_seed + seeds - 1}, {concurrency} at once, up to {turns} turns"
        )
        work = demonstration_work(run, chosen, range(first_seed, first_seed + seeds), now=time.time())
        scores = anyio.run(run_episodes, producer, work)
    _summary(run, work, scores, model)


def _summary(run_id: str, work: list[WorkRequest], scores: dict[str, ScoreEvent], model: Path) -> None:
    """Per task: episodes, demonstrations (reward 1) and every other verdict by reason."""
    from cua_stream.events import Reward

    table = Table("task", "episodes", "demonstrations", "other verdicts", title=f"run {run_id}")
    verdicts: dict[str, Counter[str]] = {}
    for w in work:
        score = scores.get(w.episode_id)
        v = score.verdict if score else None
        verdict = (
            "not scored in time" if v is None
            else "demonstration" if isinstance(v, Reward) and v.value >= 1.0
            else f"reward {v.value:g} ({v.reason})" if isinstance(v, Reward)
            else f"discard: {v.reason}"
        )  # fmt: skip
        verdicts.setdefault(w.task.name, Counter())[verdict] += 1
    for task, counts in verdicts.items():
        good = counts.pop("demonstration", 0)
        other = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))
        table.add_row(task, str(good + sum(counts.values())), str(good), other)
    out.print(table)
    out.print(f"Train on them: [bold]cua-stream sft --run-id {run_id} --model-path {model}[/bold]")
