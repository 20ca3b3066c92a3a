"""The embedded local demo's run (``cua-stream demo``, its options checked): the whole loop on one
machine — broker, topics, engine and gateway, the rollout producer, the scorer, the GRPO trainer — with a
live tap printing every event, and a closing summary (the main job: docs/tutorials/first-run.md)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import msgspec
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cua_stream.app.rollouts import rollouts
from cua_stream.app.stack import Steps, broker_and_topics, engine_and_gateway, require_engine
from cua_stream.config import BusConfig, state_dir
from cua_stream.tap import follow
from cua_stream.topics import ALL, SCORES

if TYPE_CHECKING:
    from consumers.trainer.config import TrainerConfig
    from cua_stream.app.demo import DemoPlan
    from cua_stream.events import OutcomeEvent, ScoreEvent, TrainStep
    from producers.config import ProducerConfig

out = Console(highlight=False)


def run_demo(
    plan: DemoPlan, file_data: dict[str, Any], *, environment: str, follow_after: float, engine_port: int,
    gateway_port: int, keep_broker: bool, engine_url: str | None, report: Path | None,
) -> None:  # fmt: skip
    """Run ``plan`` (``file_data``: the config file's sections): its producer on ``environment``, the
    reference engine (or the one at ``engine_url``), tapped until ``follow_after`` seconds after the last
    step; with ``report``, the run's numbers written there as JSON."""
    from cua_stream.app.demo import demo_settings, tiny_model_dir
    from producers.config import producer_config

    trials = state_dir() / "demo-trials"
    producer_overrides = {
        **demo_settings(plan)["producer"],
        "environment": environment,
        "gateway_url": f"http://127.0.0.1:{gateway_port}",
        "trials_dir": str(trials),
    }
    producer = producer_config(file_data, producer_overrides)  # a bad setting fails before anything starts
    if engine_url:
        engine_url = engine_url.rstrip("/")
        require_engine(engine_url)
    if producer.environment == "local-desktop":
        from cua_stream.desktop.doctor import require_desktop

        require_desktop()
    step = Steps(6 if producer.environment == "docker" else 5)
    if producer.environment == "docker":
        from cua_stream.containers import ensure_running

        step("starting the container engine: the private Docker daemon and its images (built once; cached)")
        home, _ = ensure_running(say=lambda line: out.print(f"    {line}"))
        out.print(f"    {home.host}")
    broker, bus = broker_and_topics(file_data, step)
    producer = msgspec.structs.replace(producer, bus=bus)
    logs = state_dir() / "demo-logs"
    step("building the tiny Qwen3-VL (once; cached)")
    model = tiny_model_dir()
    out.print(f"    {model}")
    serving_what = (
        f"the session gateway on {engine_url}"
        if engine_url
        else "the reference engine and the session gateway"
    )
    step(f"starting {serving_what} (logs in {logs})")
    try:
        with engine_and_gateway(
            model, bus, engine_port=engine_port, gateway_port=gateway_port, logs=logs, engine_url=engine_url
        ) as serving:
            anyio.run(_run, producer, model, serving.engine_url, plan, follow_after, step, report)
    except KeyboardInterrupt:
        pass
    finally:
        if not keep_broker:
            broker.stop()


async def _run(
    producer: ProducerConfig,
    model: Path,
    engine_url: str,
    plan: DemoPlan,
    follow_after: float,
    step: Steps,
    report: Path | None = None,
) -> None:
    from transformers.utils import logging as transformers_logging

    from consumers.trainer.daemon import Trainer
    from consumers.trainer.step_record import describe_step
    from cua_stream.app.demo import trainer_config
    from cua_stream.bus.reader import scan
    from cua_stream.topics import OUTCOMES

    transformers_logging.disable_progress_bar()  # the demo's own progress bar is the one to watch
    bus = producer.bus
    config = trainer_config(
        f"demo-{time.strftime('%H%M%S')}", plan, model, engine_url, producer.gateway_url, bus
    )
    steps: list[TrainStep] = []
    with Progress(
        TextColumn("[bold]GRPO[/bold] step {task.completed}/{task.total}"), BarColumn(), TimeElapsedColumn(),
        console=out, transient=True,
    ) as progress:  # fmt: skip
        bar = progress.add_task("steps", total=plan.steps)

        def on_step(event: TrainStep) -> None:
            steps.append(event)
            progress.update(bar, completed=event.step)
            out.print(f"    [bold green]step {event.step}[/bold green]: {describe_step(event)}")

        async with rollouts(producer) as running:
            running.task_group.start_soon(
                lambda: follow(
                    bus, list(ALL), emit=lambda line: out.print("    " + line, markup=False, soft_wrap=True)
                )
            )
            where = {"local-desktop": "local desktops", "docker": "Docker containers"}.get(
                producer.environment, f"the {producer.environment} environment"
            )
            step(
                f"training {plan.steps} GRPO step(s): the trainer issues groups of {plan.group_size} episodes of "
                f"the bundled tasks; the producer runs them on {where}, {plan.concurrency} at once, up to "
                f"{plan.turns} turn(s) each; each step's weights are loaded on the engine"
            )
            started = time.time()
            await Trainer(config, on_step=on_step).run()
            # the groups the trainer issued beyond its last step run to their outcomes too: nothing of this
            # run is left on the work topic for the next demo's producer
            with anyio.move_on_after(180):
                while True:
                    if not await _unanswered(bus, config.run_id):
                        break
                    await anyio.sleep(1.0)
            running.stop_producer()
            async with httpx.AsyncClient(timeout=30) as http:
                served = (await http.get(f"{engine_url}/get_model_info")).json().get("weight_version")
            await anyio.sleep(1.0)  # let the tap print the last records
            trained = {g for s in steps for g in s.group_ids}
            scores = [d.event async for d in scan(bus, SCORES) if d.event.group_id in trained]
            outcomes = {
                d.event.episode_id: d.event async for d in scan(bus, OUTCOMES) if d.event.group_id in trained
            }
            _summary(steps, scores, outcomes, served, config, producer)
            if report is not None:
                numbers = run_numbers(steps, len(outcomes), started, engine_url, served)
                await anyio.Path(report).write_text(json.dumps(numbers, indent=2))
                out.print(f"the run's numbers: {report}")
            if follow_after:
                await anyio.sleep(follow_after)


def run_numbers(
    steps: list[TrainStep], episodes: int, started: float, engine_url: str, served: str | None
) -> dict[str, object]:
    """What a GPU check reports of a run: per step the trainer-engine logprob gap, the step's time and
    the weight update's (``previous_push_s`` is measured by the next step: the last has none), and the
    episodes trained per minute of wall clock from the trainer's start to its last step."""
    wall_s = (steps[-1].finished_at - started) if steps else 0.0
    return {
        "engine_url": engine_url,
        "served_version": served,
        "wall_s": round(wall_s, 3),
        "episodes": episodes,
        "episodes_per_min": round(episodes / wall_s * 60, 2) if wall_s > 0 else 0.0,
        "steps": [
            {"step": s.step, "policy_version": s.policy_version, "n_episodes": s.n_episodes,
             "finished_at": s.finished_at, "metrics": s.metrics}
            for s in steps
        ],
    }  # fmt: skip


async def _unanswered(bus: BusConfig, run_id: str) -> int:
    """How many of the run's work requests have no outcome yet."""
    from cua_stream.bus.reader import scan
    from cua_stream.topics import OUTCOMES, WORK

    issued = {d.event.episode_id async for d in scan(bus, WORK) if d.event.run_id == run_id}
    answered = {d.event.episode_id async for d in scan(bus, OUTCOMES) if d.event.run_id == run_id}
    return len(issued - answered)


def _summary(
    steps: list[TrainStep],
    scores: list[ScoreEvent],
    outcomes: dict[str, OutcomeEvent],
    served: str | None,
    trainer: TrainerConfig,
    producer: ProducerConfig,
) -> None:
    table = Table("step", "policy version", "groups", "episodes", "mean reward", "logprob gap", "grad norm",
                  title=f"run {trainer.run_id}")  # fmt: skip
    for s in steps:
        m = s.metrics
        table.add_row(
            str(s.step), str(s.policy_version), str(s.n_groups), str(s.n_episodes),
            f"{m.get('mean_reward', 0.0):.2f}", f"{m.get('logprob_gap', 0.0):.2e}", f"{m.get('grad_norm', 0.0):.3f}",
        )  # fmt: skip
    out.print(table)
    verdicts = Counter(
        f"discard: {v.reason}" if v.__struct_config__.tag == "discard" else f"reward {v.value:g} ({v.reason})"
        for v in (sc.verdict for sc in scores)
    )
    tasks = Counter(o.task for o in outcomes.values())
    out.print(f"episodes trained: {len(scores)} ({', '.join(f'{t} x{n}' for t, n in sorted(tasks.items()))})")
    out.print("verdicts: " + ", ".join(f"{k} x{n}" for k, n in sorted(verdicts.items())))
    out.print(
        f"policy versions: 0 -> {steps[-1].policy_version if steps else 0}; the engine serves v{served}"
    )
    out.print(f"checkpoints and weights: {trainer.checkpoints}")
    out.print(f"screenshots (blob store): {trainer.blobs}")
    out.print(f"Harbor trials: {producer.trials_path}; daemon logs: {state_dir() / 'demo-logs'}")
    out.print("A random tiny policy earns 0 on every task (the bundled tasks' oracle solves each one), so these "
              "steps move no weights yet: the loop, not the learning, is what this shows.")  # fmt: skip
    out.print("Replay any of it: [bold]cua-stream replay --topic turns -o turns.jsonl[/bold]; "
              "follow it live: [bold]cua-stream tap[/bold]; see it on a web page (rewards, verdicts, each "
              "episode's screenshots and actions): [bold]cua-stream dashboard --model-path "
              f"{trainer.model_path}[/bold], then http://127.0.0.1:8050/")  # fmt: skip
