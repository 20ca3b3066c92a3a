"""`cua-stream learn`: its options, parsed into its plan (``cua_stream.app.learn.plan.LearnPlan``) and
checked, each bad one named; the plan then runs as ``cua_stream.app.learn.pipeline`` (base evaluation,
oracle demonstrations, SFT, GRPO through the whole streaming loop, each policy evaluated, the curve)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from cua_stream.app.learn.pipeline import learn as pipeline
from cua_stream.app.learn.plan import LearnPlan
from cua_stream.cli.common import ConfigFile, friendly_errors, load_file, parse_tasks, require_playable
from cua_stream.cli.defaults import plan_option


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
    pipeline(plan, file_data, engine_port=engine_port, gateway_port=gateway_port,
             policies_port=policies_port, started=started)  # fmt: skip


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
