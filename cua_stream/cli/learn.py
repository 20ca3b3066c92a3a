"""`cua-stream learn`: a learning curve on one machine — evaluate the base policy, record oracle
demonstrations, SFT warm start, evaluate it, then GRPO through the whole streaming loop and evaluate
its policy; the reward per step and task plotted to a PNG (and on the dashboard: it reads the same
topics). Every evaluation (and SFT probe) is ``cua-stream eval``'s: its results file under
``<home>/learn/<run>/eval/`` (``eval compare`` reads them) and its report on the evals topic."""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import msgspec
import typer

from cua_stream.cli._common import ConfigFile, friendly_errors, load_file
from cua_stream.cli._defaults import plan_option
from cua_stream.cli._learn_grpo import grpo_deadline, own_bound, sampling_said, train, update_said
from cua_stream.cli._learn_report import curve_of, report
from cua_stream.cli._learn_sft import Evaluations, Prober, sft, sft_end
from cua_stream.cli._stack import (
    Steps,
    broker_and_topics,
    engine_and_gateway,
    out,
    parse_tasks,
    require_playable,
    teacher_stack,
)
from cua_stream.config import BusConfig, state_dir
from cua_stream.learn import LearnPlan
from cua_stream.rollouts import run_episodes

if TYPE_CHECKING:
    from cua_stream.evaluation.results import EvalResults
    from cua_stream.events import EvalReport


@friendly_errors
def learn(
    seed: Annotated[
        int | None,
        plan_option(LearnPlan, "seed", help="Seeds the base model, the layouts of SFT and evaluation."),
    ] = None,
    model_size: Annotated[
        str | None,
        plan_option(LearnPlan, "model_size", help="The base policy: tiny or small (models.tiny.SIZES)."),
    ] = None,
    tasks: Annotated[
        str | None,
        plan_option(
            LearnPlan,
            "tasks",
            help="Comma-separated tasks GRPO trains on: bundled, 'all', or miniwob/<name> (globs).",
        ),
    ] = None,
    demo_tasks: Annotated[
        str | None,
        plan_option(LearnPlan, "demo_tasks", help="Tasks demonstrated for SFT (default: --tasks)."),
    ] = None,
    demos: Annotated[
        int | None, plan_option(LearnPlan, "demo_seeds", "--demos", help="Oracle demonstrations per task.")
    ] = None,
    drawn_demos: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "drawn_demos",
            help="First screens drawn from the click-box demonstrations' on new layouts, for SFT.",
        ),
    ] = None,
    drawn_epochs: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "drawn_epochs",
            help="Passes over the drawn screens before SFT on the recorded demonstrations.",
        ),
    ] = None,
    eval_episodes: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "eval_episodes",
            help="Held-out layouts per task measuring the base, SFT and GRPO policies.",
        ),
    ] = None,
    sft_epochs: Annotated[
        int | None, plan_option(LearnPlan, "sft_epochs", help="The most SFT passes over the demonstrations.")
    ] = None,
    sft_target_nll: Annotated[
        float | None,
        plan_option(
            LearnPlan,
            "sft_target_nll",
            help="SFT's floor: end it at this demonstrations' token NLL at the latest (0: all epochs).",
        ),
    ] = None,
    sft_start_success: Annotated[
        float | None,
        plan_option(
            LearnPlan,
            "sft_start_success",
            help="End SFT once sampled episodes on new layouts succeed this often (0: no probing).",
        ),
    ] = None,
    sft_probe_nll: Annotated[
        float | None,
        plan_option(
            LearnPlan, "sft_probe_nll", help="Probe SFT's weights from this demonstrations' NLL down."
        ),
    ] = None,
    probe_episodes: Annotated[
        int | None, plan_option(LearnPlan, "probe_episodes", help="Sampled episodes per SFT probe.")
    ] = None,
    probes_per_epoch: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "probes_per_epoch",
            help="SFT probes per epoch, at equal shares of it (its end included).",
        ),
    ] = None,
    steps: Annotated[
        int | None,
        plan_option(LearnPlan, "steps", help="GRPO steps (the budget usually ends the run first)."),
    ] = None,
    group_size: Annotated[
        int | None, plan_option(LearnPlan, "group_size", help="Episodes per GRPO group.")
    ] = None,
    groups_per_step: Annotated[
        int | None, plan_option(LearnPlan, "groups_per_step", help="Groups per GRPO step.")
    ] = None,
    lr: Annotated[float | None, plan_option(LearnPlan, "lr", help="GRPO learning rate.")] = None,
    lr_warmup_steps: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "lr_warmup_steps",
            help="GRPO steps over which the learning rate ramps up to --lr (0: none).",
        ),
    ] = None,
    passes: Annotated[
        int | None, plan_option(LearnPlan, "passes", help="Optimizer updates per GRPO step on its batch.")
    ] = None,
    kl_coef: Annotated[
        float | None,
        plan_option(
            LearnPlan, "kl_coef", help="Weight of the KL to the SFT weights in GRPO's loss (0: off)."
        ),
    ] = None,
    negative_scale: Annotated[
        float | None,
        plan_option(
            LearnPlan,
            "negative_scale",
            help="Weight of GRPO's negative advantages (1: GRPO; 0: reinforce only the winners).",
        ),
    ] = None,
    max_parse_errors: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "max_parse_errors",
            help="End an episode at this many consecutive unparsable replies (unset or 0: never).",
        ),
    ] = None,
    loss_reduction: Annotated[
        str | None,
        plan_option(
            LearnPlan,
            "loss_reduction",
            help="GRPO loss: 'episode' (token mean per episode) or 'token' (over all tokens).",
        ),
    ] = None,
    temperature: Annotated[
        float | None, plan_option(LearnPlan, "temperature", help="GRPO's sampling (and logprob) temperature.")
    ] = None,
    top_k: Annotated[
        int | None,
        plan_option(
            LearnPlan,
            "top_k",
            help="GRPO samples from the top_k likeliest tokens (-1: all); logprobs unfiltered.",
        ),
    ] = None,
    min_p: Annotated[
        float | None,
        plan_option(
            LearnPlan, "min_p", help="GRPO drops tokens below min_p x the likeliest's probability (0: none)."
        ),
    ] = None,
    budget_minutes: Annotated[
        float | None, plan_option(LearnPlan, "budget_minutes", help="Stop GRPO when the run is this old.")
    ] = None,
    grpo_minutes: Annotated[
        float | None,
        plan_option(
            LearnPlan,
            "grpo_minutes",
            help="Stop GRPO when it has run this long, too (unset or 0: only --budget-minutes).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None, plan_option(LearnPlan, "concurrency", help="Episodes (desktops) at once.")
    ] = None,
    engine_port: Annotated[int, typer.Option(help="Reference engine port.")] = 30000,
    gateway_port: Annotated[int, typer.Option(help="Session gateway port.")] = 8000,
    policies_port: Annotated[int, typer.Option(help="Scripted-policy server port (the teacher).")] = 8090,
    config: ConfigFile = None,
) -> None:
    """Base evaluation, oracle demonstrations, SFT and its evaluation, then GRPO steps through the producer,
    gateway, engine, scorer and trainer and their evaluation; prints the curve and per-task success (95 %
    intervals), writes <home>/learn/<run>/curve.png and the evaluations' results files.

    Example: cua-stream learn --tasks click-button --budget-minutes 30"""
    from transformers.utils import logging as transformers_logging

    from consumers.trainer.stream.feeder import demonstration_work, sampling_of
    from cua_stream.desktop.doctor import require_desktop
    from cua_stream.evaluate import Evaluation
    from cua_stream.learn import success_by_task
    from cua_stream.models.tiny import make_tiny_model
    from producers.config import producer_config

    started = time.monotonic()
    plan = _plan(
        seed=seed,
        model_size=model_size,
        tasks=tuple(parse_tasks(tasks)) if tasks is not None else None,
        demo_tasks=tuple(parse_tasks(demo_tasks, hint="--demo-tasks")) if demo_tasks else None,
        demo_seeds=demos,
        drawn_demos=drawn_demos,
        drawn_epochs=drawn_epochs,
        eval_episodes=eval_episodes,
        sft_epochs=sft_epochs,
        sft_target_nll=sft_target_nll,
        sft_start_success=sft_start_success,
        sft_probe_nll=sft_probe_nll,
        probe_episodes=probe_episodes,
        probes_per_epoch=probes_per_epoch,
        steps=steps,
        group_size=group_size,
        groups_per_step=groups_per_step,
        lr=lr,
        lr_warmup_steps=lr_warmup_steps,
        passes=passes,
        kl_coef=kl_coef,
        negative_scale=negative_scale,
        loss_reduction=loss_reduction,
        max_parse_errors=max_parse_errors,
        temperature=temperature,
        top_k=top_k,
        min_p=min_p,
        concurrency=concurrency,
        budget_minutes=budget_minutes,
        grpo_minutes=grpo_minutes,
    )
    require_playable(
        "oracle",
        list(plan.demonstrated),
        "--demo-tasks" if plan.demo_tasks else "--tasks (or give --demo-tasks)",
    )
    file_data = load_file(config)
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
    from cua_stream.evaluate import publish_report
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


OPTION_OF = {"demo_seeds": "--demos"}
"""``LearnPlan`` fields whose option is not the field's name with dashes."""
ZERO_IS_NONE = ("sft_target_nll", "sft_start_success", "max_parse_errors", "grpo_minutes")
"""Plan fields whose option's 0 is the field's None (no floor, no probing, never, no bound of its own)."""


def _plan(**given: Any) -> LearnPlan:
    """The plan of the options given (None: not given, the plan's default holds); a setting out of range is
    the option's error (exit 2, named)."""
    settings = {
        field: None if field in ZERO_IS_NONE and value == 0 else value
        for field, value in given.items()
        if value is not None
    }
    try:
        return LearnPlan(**settings)
    except ValueError as e:
        field, _, want = str(e).partition(": ")
        raise typer.BadParameter(
            want, param_hint=OPTION_OF.get(field, "--" + field.replace("_", "-"))
        ) from None
