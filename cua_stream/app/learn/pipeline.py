"""`cua-stream learn`'s pipeline, given its plan: a learning curve on one machine — evaluate the base
policy, record oracle demonstrations, SFT warm start, evaluate it, then GRPO through the whole streaming
loop and evaluate its policy; the reward per step and task plotted to a PNG (and on the dashboard: it
reads the same topics). Every evaluation (and SFT probe) is ``cua-stream eval``'s: its results file under
``<home>/learn/<run>/eval/`` (``eval compare`` reads them) and its report on the evals topic."""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from cua_stream.app.learn.grpo import grpo_deadline, own_bound, sampling_said, train, update_said
from cua_stream.app.learn.plan import LearnPlan
from cua_stream.app.learn.report import curve_of, report
from cua_stream.app.learn.sft import Evaluations, Prober, sft, sft_end
from cua_stream.app.rollouts import run_episodes
from cua_stream.app.stack import Steps, broker_and_topics, engine_and_gateway, out, teacher_stack
from cua_stream.config import BusConfig, state_dir

if TYPE_CHECKING:
    from cua_stream.evaluation.results import EvalResults
    from cua_stream.events import EvalReport


def learn(
    plan: LearnPlan, file_data: dict[str, Any], *, engine_port: int, gateway_port: int, policies_port: int,
    started: float,
) -> None:  # fmt: skip
    """Run ``plan`` (``file_data``: the config file's sections; ``started``: the command's start on the
    monotonic clock, the budget's origin): prints the curve and per-task success (95 % intervals), writes
    <home>/learn/<run>/curve.png and the evaluations' results files."""
    from transformers.utils import logging as transformers_logging

    from consumers.trainer.stream.feeder import demonstration_work, sampling_of
    from cua_stream.app.evaluate.episodes import Evaluation
    from cua_stream.app.learn.plan import success_by_task
    from cua_stream.desktop.doctor import require_desktop
    from cua_stream.models.tiny import make_tiny_model
    from producers.config import producer_config

    run = f"learn-{time.strftime('%Y%m%d-%H%M%S')}-s{plan.seed}"
    home = state_dir() / "learn" / run
    producer = producer_config(
        file_data,
        {
            **plan.producer_settings(),
            "gateway_url": f"http://127.0.0.1:{gateway_port}",
            "trials_dir": str(home / "trials"),
            "runs": [run],  # its own work only: a stopped run's left on the topic is not played
        },
    )
    require_desktop()
    transformers_logging.disable_progress_bar()
    step = Steps(9)
    _, bus = broker_and_topics(file_data, step)
    producer = msgspec.structs.replace(producer, bus=bus)
    sampling = sampling_of(plan.temperature, plan.max_new_tokens, top_k=plan.top_k, min_p=plan.min_p)
    evals = Evaluations(run, home / "eval", Evaluation(plan.evaluation_plan(), producer, sampling))
    timings: dict[str, float] = {}

    step(f"building the base policy ({plan.model_size} random Qwen3-VL, seed {plan.seed})")
    base = make_tiny_model(home / "base", seed=plan.seed, size=plan.model_size)
    logs = home / "logs"
    step(
        f"evaluating the base policy ({plan.eval_episodes} held-out layouts per task) and recording "
        f"{plan.demo_seeds} oracle demonstrations per task of {', '.join(plan.demonstrated)} through the "
        f"gateway (logs in {logs})"
    )
    t0 = time.monotonic()
    demonstrations = demonstration_work(
        f"{run}-oracle", plan.demonstrated, plan.demo_layouts(), now=time.time()
    )
    blind = _blind(plan, run, bus)
    with teacher_stack(
        base, bus, engine_port=engine_port, gateway_port=gateway_port, policies_port=policies_port, logs=logs
    ):
        before = anyio.run(evals.of, "base")
        scores = anyio.run(run_episodes, producer, demonstrations)
    timings["evaluation and demonstrations"] = time.monotonic() - t0
    recorded = success_by_task(demonstrations, scores)
    out.print(f"    base policy success: {_rates(before)}; oracle demonstrations rewarded: {_pct(recorded)}")

    step(f"SFT on the rewarded demonstrations, {sft_end(plan)}")
    t0 = time.monotonic()
    with ExitStack() as probe_stack:
        probes = Evaluations(run, evals.home, Evaluation(plan.probe_plan(), producer, sampling))
        ports = {"engine_port": engine_port, "gateway_port": gateway_port}
        prober = Prober(plan, probes, base, probe_stack, **ports, logs=logs)
        sft_model = sft(plan, bus, base, home, f"{run}-oracle", prober)
    timings["SFT"] = time.monotonic() - t0

    with engine_and_gateway(
        sft_model, bus, engine_port=engine_port, gateway_port=gateway_port, logs=logs
    ) as s:
        step(f"evaluating the SFT policy ({plan.eval_episodes} held-out layouts per task)")
        t0 = time.monotonic()
        after_sft = anyio.run(evals.of, "sft")
        timings["evaluations after SFT and GRPO"] = eval_s = time.monotonic() - t0
        out.print(f"    SFT policy success: {_rates(after_sft)}")
        t0 = time.monotonic()
        deadline = grpo_deadline(plan, started, t0, eval_s)
        step(
            f"GRPO from the SFT weights: up to {plan.steps} steps of {plan.groups_per_step} x {plan.group_size} "
            f"episodes on new layouts (sampling {sampling_said(plan)}; {update_said(plan)}), ending within "
            f"{plan.budget_minutes:g} min of the start" + own_bound(plan)
        )
        trained = anyio.run(train, plan, producer, sft_model, s.engine_url, f"{run}-grpo", home, deadline)
        timings["GRPO"] = time.monotonic() - t0
        step(f"evaluating the GRPO policy ({plan.eval_episodes} held-out layouts per task)")
        t0 = time.monotonic()
        after_grpo = anyio.run(evals.of, "grpo")  # the engine serves the trainer's last version
        timings["evaluations after SFT and GRPO"] += time.monotonic() - t0
        out.print(f"    GRPO policy success: {_rates(after_grpo)}")

    step("the curve")
    curve = anyio.run(curve_of, bus, f"{run}-grpo", base)
    evaluated = {"base": before, "sft": after_sft, "grpo": after_grpo}
    report(
        plan, curve, blind, evaluated, trained, timings, prober.history, home, run, time.monotonic() - started
    )


def _blind(plan: LearnPlan, run: str, bus: BusConfig) -> EvalReport:
    """The blind baseline of ``plan``'s tasks (the best fixed click, computed from their layouts: no
    episode is played), published on the evals topic beside the policies' evaluations."""
    from cua_stream.app.evaluate.episodes import publish_report
    from cua_stream.evaluation.plan import eval_seeds
    from cua_stream.identity import EVAL_RUN_PREFIX
    from cua_stream.learn_table import BLIND_LAYOUTS, blind_report

    blind = blind_report(
        plan.tasks, eval_seeds(0, BLIND_LAYOUTS), f"{EVAL_RUN_PREFIX}{run}-blind", time.time()
    )
    anyio.run(publish_report, bus, blind)
    hits = {t.task: f"{t.task} {t.successes}/{t.scored}" for t in blind.tasks}
    said = [hits.get(task, f"{task} none (no single click solves it)") for task in plan.tasks]
    out.print(
        f"    blind baseline (the best fixed click, over {BLIND_LAYOUTS} layouts per task): {', '.join(said)}"
    )
    return blind


def _pct(values: dict[str, float]) -> str:
    return ", ".join(f"{t} {v:.0%}" for t, v in values.items()) or "none"


def _rates(results: EvalResults) -> str:
    """Per task: successes of the scored episodes, with the rate's 95 % interval."""
    from cua_stream.evaluation.stats import OVERALL, by_task

    tasks = [(t, s) for t, s in by_task(results.episodes).items() if t != OVERALL]
    return (
        ", ".join(
            f"{t} {s.successes}/{s.scored} (95% CI {s.interval.low:.2f}-{s.interval.high:.2f})"
            for t, s in tasks
        )
        or "none"
    )
