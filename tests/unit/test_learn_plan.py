"""`learn`'s plan and curve (pure): seeds kept apart, reward per step and task from the records."""

from __future__ import annotations

import zlib

import pytest

from consumers.trainer.stream.feeder import work_for_group
from cua_stream.app.learn.plan import SEED_SPACE, LearnPlan, reward_curve, success_by_task
from cua_stream.errors import ConfigError
from cua_stream.evaluation.plan import is_eval_seed
from cua_stream.events import Discard, Reward, ScoreEvent, TrainStep
from cua_stream.identity import group_id_of, layout_seed


def step(n: int, groups: list[str]) -> TrainStep:
    return TrainStep(
        run_id="r", step=n, policy_version=n, n_groups=len(groups), n_episodes=0, n_samples=0, loss=0.0,
        group_ids=tuple(groups), finished_at=0.0,
    )  # fmt: skip


def score(group: str, i: int, verdict: Reward | Discard) -> ScoreEvent:
    return ScoreEvent(
        run_id="r",
        group_id=group,
        episode_id=f"{group}-e{i}",
        verdict=verdict,
        policy_version=0,
        scored_at=0.0,
    )


def test_demonstration_and_evaluation_layouts_are_never_a_grpo_groups() -> None:
    plans = [LearnPlan(seed=s, demo_seeds=50, eval_episodes=10, probe_episodes=20) for s in range(3)]
    demos = [set(p.demo_layouts()) for p in plans]
    assert all(len(d) == 50 for d in demos) and not (demos[0] & demos[1] or demos[1] & demos[2])
    grpo = work_for_group(
        "run", 7, tasks=["click-button"], group_size=2, policy_version=0, sampling={}, now=0
    )
    assert layout_seed(grpo[0]) == zlib.crc32(group_id_of("run", 7).encode()) < SEED_SPACE
    assert min(min(d) for d in demos) >= SEED_SPACE
    # evaluations and probes: eval's layouts (every learn seed measured on the same ones), apart
    evaluated, probed = set(plans[0].evaluation_plan().seeds), set(plans[0].probe_plan().seeds)
    assert len(evaluated) == 10 and len(probed) == 20 and not evaluated & probed
    assert all(is_eval_seed(s) for s in evaluated | probed)
    assert all(set(p.evaluation_plan().seeds) == evaluated for p in plans)


def test_the_curve_is_the_mean_reward_per_step_and_task() -> None:
    tasks = ["click-button", "fill-form", "click-button", "fill-form"]
    work = [w for i, t in enumerate(tasks) for w in work_for_group(
        "r", i, tasks=[t], group_size=2, policy_version=0, sampling={}, now=0)]  # fmt: skip
    g = [group_id_of("r", i) for i in range(4)]
    scores = [
        score(g[0], 0, Reward(value=0.0)), score(g[0], 1, Reward(value=1.0)),
        score(g[1], 0, Reward(value=0.0)), score(g[1], 1, Reward(value=0.0)),
        score(g[2], 0, Reward(value=1.0)), score(g[2], 1, Reward(value=1.0)),
        score(g[3], 0, Reward(value=1.0)), score(g[3], 1, Discard(reason="sandbox_lost")),
    ]  # fmt: skip
    good = '{"analysis": "a", "plan": "p", "action": {"type": "click", "x": 1, "y": 2}}'
    replies = {
        g[0]: [good, "{not json"],
        g[1]: ['{"action": {"x": 1}}', good],
        g[2]: [good],
        g[3]: ['{"action": 3}'],
    }
    curve = reward_curve([step(2, [g[2], g[3]]), step(1, [g[0], g[1]])], work, scores, replies)
    assert curve.valid == [0.5, 0.5] and curve.valid_ends(1) == (0.5, 0.5)
    assert curve.steps == [1, 2]
    assert curve.overall == pytest.approx([0.25, 1.0])
    assert curve.by_task == {"click-button": [0.5, 1.0], "fill-form": [0.0, 1.0]}
    assert curve.ends(1) == pytest.approx((0.25, 1.0))


def test_success_counts_a_reward_of_one_and_nothing_else() -> None:
    work = work_for_group("r", 0, tasks=["read-value"], group_size=3, policy_version=0, sampling={}, now=0)
    scores = {
        work[0].episode_id: score(work[0].group_id, 0, Reward(value=1.0)),
        work[1].episode_id: score(work[0].group_id, 1, Reward(value=0.5)),
    }  # the third was never scored
    assert success_by_task(work, scores) == {"read-value": pytest.approx(1 / 3)}


def test_the_plans_settings_are_what_the_trainer_and_producer_accept() -> None:
    from consumers.trainer.config import TrainerConfig
    from cua_stream.app.demo import tiny_model_dir
    from cua_stream.config import convert
    from producers.config import ProducerConfig

    plan = LearnPlan(
        temperature=0.6, steps=7, passes=3, top_k=20, kl_coef=0.3, negative_scale=0.0, lr_warmup_steps=4
    )
    trainer = convert(
        TrainerConfig,
        "trainer",
        {"run_id": "r", "model_path": str(tiny_model_dir()), **plan.trainer_settings()},
    )
    assert (trainer.temperature, trainer.max_steps, trainer.tasks, trainer.passes) == (
        0.6,
        7,
        ["click-test"],
        3,
    )
    assert trainer.loss.kl_coef == 0.3
    assert trainer.policy.negative_scale == 0.0
    assert trainer.lr_warmup_steps == 4
    # the run's work samples as the plan says (the filter named only when on)
    work = work_for_group(
        "r", 0, tasks=["click-test"], group_size=2, policy_version=0, sampling=trainer.sampling, now=0
    )
    assert work[0].sampling == {
        "temperature": 0.6,
        "max_new_tokens": plan.max_new_tokens,
        "top_k": 20,
        "min_p": 0.1,
    }
    assert (
        "top_k"
        not in convert(
            TrainerConfig, "trainer", {"run_id": "r", "model_path": str(tiny_model_dir())}
        ).sampling
    )
    for field, value, message in [
        ("passes", 0, r"trainer\.passes: must be >= 1"),
        ("kl_coef", -0.1, r"trainer\.kl_coef: must be >= 0"),
        ("negative_scale", -1.0, r"trainer\.negative_scale: must be >= 0"),
        ("lr_warmup_steps", -1, r"trainer\.lr_warmup_steps: must be >= 0"),
        ("top_k", 0, r"trainer\.top_k: -1 \(off\) or >= 1, not 0"),
        ("top_p", 0.0, r"trainer\.top_p: in \(0, 1\], not 0\.0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            convert(
                TrainerConfig, "trainer", {"run_id": "r", "model_path": str(tiny_model_dir()), field: value}
            )
    producer = convert(ProducerConfig, "producer", plan.producer_settings())
    assert producer.max_turns == plan.turns and producer.concurrency == plan.concurrency


def test_sft_ends_at_the_start_success_and_never_without_one() -> None:
    plan = LearnPlan(sft_start_success=0.25)
    assert [plan.warm_enough(s) for s in (0.0, 0.1875, 0.25, 0.9)] == [False, False, True, True]
    assert not LearnPlan(sft_start_success=None).warm_enough(1.0)


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--sft-start-success", "1.5", "in [0, 1] (0: no probing)"),
        ("--sft-probe-nll", "0", "above 0"),
        ("--probe-episodes", "0", "in 1..999999"),
        ("--demos", "0", "in 1..999999"),
        ("--seed", "200000", "in 0..109521"),
        ("--steps", "0", "at least 1"),
        ("--min-p", "1", "in [0, 1)"),
        ("--kl-coef", "-1", "0 (off) or more"),
        ("--negative-scale", "-0.5", "0 (only the winners) or more"),
        ("--lr-warmup-steps", "-1", "0 (none) or more"),
        ("--probes-per-epoch", "0", "at least 1"),
        ("--drawn-demos", "-1", "in 0..999999"),
        ("--drawn-epochs", "0", "at least 1"),
        ("--grpo-minutes", "-5", "0 (no bound of its own) or more"),
        ("--budget-minutes", "0", "above 0"),
        ("--budget-minutes", "nan", "above 0"),
    ],
)
def test_a_bad_learn_option_fails_at_start_naming_it(flag: str, value: str, says: str) -> None:
    import os
    import subprocess
    import sys

    env = os.environ | {"COLUMNS": "200", "CUA_HOME": "/nonexistent"}  # nothing is started or written
    res = subprocess.run([sys.executable, "-m", "cua_stream", "learn", flag, value], capture_output=True,
                         text=True, timeout=120, env=env)  # fmt: skip
    said = " ".join((res.stdout + res.stderr).replace("│", " ").split())
    assert res.returncode == 2 and flag in said and says in said, said


def test_grpo_stops_at_the_runs_budget_or_its_own_whichever_comes_first() -> None:
    from cua_stream.app.learn.grpo import WRAP_UP_S, grpo_deadline

    # the run started at 0; SFT and its evaluation (100 s) ended at 3000 s; a 90-minute budget
    whole = 90 * 60 - WRAP_UP_S - 100
    assert grpo_deadline(LearnPlan(budget_minutes=90), 0, 3000, 100) == whole
    assert (
        grpo_deadline(LearnPlan(budget_minutes=90, grpo_minutes=30), 0, 3000, 100)
        == 3000 + 30 * 60 - WRAP_UP_S
    )
    assert grpo_deadline(LearnPlan(budget_minutes=90, grpo_minutes=60), 0, 3000, 100) == whole


def test_demonstrations_cover_grpos_tasks_unless_told_otherwise() -> None:
    assert LearnPlan(tasks=("click-test", "fill-form")).demonstrated == ("click-test", "fill-form")
    plan = LearnPlan(tasks=("click-test",), demo_tasks=("click-button",))
    assert plan.demonstrated == ("click-button",) and plan.trainer_settings()["tasks"] == ["click-test"]


@pytest.mark.model
@pytest.mark.parametrize("size", ["tiny", "small"])
def test_each_model_size_builds_and_runs_a_forward(size: str) -> None:
    import torch

    from cua_stream.models.tiny import IM_END_ID, SIZES, build_model, tiny_config

    config = tiny_config(size)
    text = config.text_config
    assert text.hidden_size == SIZES[size]["hidden"] == config.vision_config.out_hidden_size
    assert sum(text.rope_parameters["mrope_section"]) == text.head_dim // 2
    model = build_model(seed=3, size=size)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[151644, 872, 198, 9707, IM_END_ID]])).logits
    assert logits.shape == (1, 5, 151_936) and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="one of tiny, small"):
        tiny_config("huge")


def test_a_reply_carries_an_action_only_as_computer_1_reads_one() -> None:
    from cua_stream.tasks.policies import progress, reply_action, reply_text

    assert reply_action(reply_text({"type": "done", "result": "done"})) == {"type": "done", "result": "done"}
    for broken in ("", "{", "[1]", '{"action": "click"}', '{"action": {"x": 3}}', '{"action": {"type": 3}}'):
        assert reply_action(broken) is None, broken
    waits = [
        reply_text({"type": "wait", "duration": 1}),
        reply_text({"type": "click", "x": 1, "y": 1}),
        "junk",
    ]
    assert progress(waits) == 1


def test_the_commands_defaults_are_the_plans() -> None:
    """learn's options have no defaults of their own (its --help shows the plan's:
    tests/unit/test_cli_defaults.py): unset, each leaves the plan's default; 0 turns an optional bound off."""
    import dataclasses
    import inspect

    from cua_stream.cli.learn import _plan, learn

    own = {"engine_port": 30000, "gateway_port": 8000, "policies_port": 8090, "config": None}
    for name, param in inspect.signature(learn).parameters.items():
        assert param.default == own.get(name), name  # None: not given
    assert _plan(**{f.name: None for f in dataclasses.fields(LearnPlan)}) == LearnPlan()
    assert _plan(demo_seeds=3, sft_target_nll=0, grpo_minutes=0, max_parse_errors=0, min_p=0) == LearnPlan(
        demo_seeds=3, sft_target_nll=None, grpo_minutes=None, max_parse_errors=None, min_p=0
    )
