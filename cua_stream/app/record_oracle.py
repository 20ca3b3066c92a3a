"""Recording oracle demonstrations (``cua-stream record-oracle``'s work, its options checked): the
tasks' oracle plays real computer-1 trials, its replies forced through the gateway and scored by the
engine as the policy's completions, so each turn lands on the turn topic as a sampled turn would; the
scorer's verifiers judge each episode. What was recorded is printed per task."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from rich.table import Table

from cua_stream.app.rollouts import run_episodes
from cua_stream.app.stack import Steps, broker_and_topics, episode_producer, out, teacher_stack
from cua_stream.config import state_dir

if TYPE_CHECKING:
    from cua_stream.events import ScoreEvent, WorkRequest


def record_oracle(
    chosen: list[str], file_data: dict[str, Any], *, run_id: str, seeds: int, first_seed: int,
    model_path: Path | None, environment: str, turns: int, concurrency: int, engine_port: int,
    gateway_port: int, policies_port: int,
) -> None:  # fmt: skip
    """Record ``seeds`` layouts (from ``first_seed``) of each ``chosen`` task under the run ``run_id``
    (empty: ``oracle-<time>``), the replies scored by ``model_path`` (else the demo's tiny model)."""
    from consumers.trainer.stream.feeder import demonstration_work
    from cua_stream.app.demo import tiny_model_dir

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
