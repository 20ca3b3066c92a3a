"""``cua-stream learn``'s plan and its learning curve. Pure: the seeds each phase uses, the settings of
its daemons, and the fold of the run's records into reward per step and task.

The phases: evaluate the base policy, record oracle demonstrations (forced completions through the
gateway), SFT on the rewarded ones (probed by evaluations of its weights), evaluate the SFT policy, GRPO
through the whole streaming loop from the SFT weights, evaluate the GRPO policy. Each evaluation is
``cua-stream eval``'s (``cua_stream.evaluation``). Seeds are kept apart by construction: demonstrations
use layout seeds at or above ``2**32``, evaluations and probes ``eval``'s range (``2**40`` and up; the
evaluations the same layouts as ``cua-stream eval run --seeds N``, the probes from index ``PROBE_FIRST``),
GRPO's groups draw theirs from a CRC-32 of the group id (below ``2**32``): GRPO never sees a layout SFT
was shown or a policy is measured on.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumers.trainer.config import TRAINER_DEFAULTS
from cua_stream.evaluation.plan import EvalPlan, eval_seeds
from cua_stream.evaluation.results import EvalResults
from cua_stream.evaluation.stats import OVERALL, Summary, by_task
from cua_stream.events import Reward, ScoreEvent, TaskRef, TrainStep, WorkRequest
from cua_stream.tasks.policies import reply_action
from producers.config import PRODUCER_DEFAULTS

SEED_SPACE = 2**32
"""Seeds at or above this are never a group's CRC-32 (``identity.layout_seed``)."""
EVAL_OFFSET = 1_000_000
MAX_SEED = (2**40 - SEED_SPACE - 3 * EVAL_OFFSET) // (10 * EVAL_OFFSET)
"""The largest ``--seed`` whose demonstration layouts (``SEED_SPACE + seed * 10^7`` and up) stay below
the evaluation range (``cua_stream.evaluation.plan``, 2^40 and up)."""
PROBE_FIRST = 2**31
"""The index in the evaluation range of the SFT probes' first layout: apart from the evaluations' (from
index 0), so that the layouts that decide where SFT ends are not the ones it is then measured on."""


def plan_problem(plan: LearnPlan) -> str | None:
    """``<field>: what it must be`` for the first setting of ``plan`` out of its range, or None."""
    from cua_stream.models.tiny import SIZES

    per_kind = EVAL_OFFSET - 1  # demonstrations never reach the next seed's; evaluations never the probes'
    checks: list[tuple[str, bool, str]] = [
        ("seed", 0 <= plan.seed <= MAX_SEED, f"in 0..{MAX_SEED} (its layouts stay below evaluation's, 2^40)"),
        ("demo_seeds", 1 <= plan.demo_seeds <= per_kind, f"in 1..{per_kind}"),
        ("drawn_demos", 0 <= plan.drawn_demos <= per_kind, f"in 0..{per_kind}"),
        ("drawn_epochs", plan.drawn_epochs >= 1, "at least 1"),
        ("eval_episodes", 1 <= plan.eval_episodes <= per_kind, f"in 1..{per_kind}"),
        ("probe_episodes", 1 <= plan.probe_episodes <= per_kind, f"in 1..{per_kind}"),
        ("sft_epochs", plan.sft_epochs >= 1, "at least 1"),
        ("steps", plan.steps >= 1, "at least 1"),
        ("group_size", plan.group_size >= 1, "at least 1"),
        ("groups_per_step", plan.groups_per_step >= 1, "at least 1"),
        ("concurrency", plan.concurrency >= 1, "at least 1"),
        ("lr", plan.lr > 0, "above 0"),
        ("temperature", plan.temperature > 0, "above 0"),
        ("model_size", plan.model_size in SIZES, f"one of {', '.join(SIZES)}"),
        ("loss_reduction", plan.loss_reduction in ("episode", "token"), "'episode' or 'token'"),
        ("passes", plan.passes >= 1, "at least 1"),
        ("lr_warmup_steps", plan.lr_warmup_steps >= 0, "0 (none) or more"),
        ("kl_coef", plan.kl_coef >= 0, "0 (off) or more"),
        ("negative_scale", plan.negative_scale >= 0, "0 (only the winners) or more"),  # NaN too
        ("sft_target_nll", plan.sft_target_nll is None or plan.sft_target_nll >= 0, "0 (all the epochs) or more"),
        ("sft_start_success", plan.sft_start_success is None or 0 <= plan.sft_start_success <= 1,
         "in [0, 1] (0: no probing)"),
        ("sft_probe_nll", plan.sft_probe_nll > 0, "above 0"),
        ("probes_per_epoch", plan.probes_per_epoch >= 1, "at least 1"),
        ("top_k", plan.top_k == -1 or plan.top_k >= 1, "-1 (all tokens) or at least 1"),
        ("min_p", 0 <= plan.min_p < 1, "in [0, 1)"),
        ("max_parse_errors", plan.max_parse_errors is None or plan.max_parse_errors >= 1, "0 (never) or more"),
        ("budget_minutes", plan.budget_minutes > 0, "above 0"),
        ("grpo_minutes", plan.grpo_minutes is None or plan.grpo_minutes > 0, "0 (no bound of its own) or more"),
    ]  # fmt: skip
    return next((f"{name}: {want}" for name, ok, want in checks if not ok), None)


@dataclass(frozen=True)
class LearnPlan:
    seed: int = 0
    """Seeds the base model, the demonstration and evaluation layouts, and the engine."""
    model_size: str = "tiny"
    """The base policy's size (``models.tiny.SIZES``); the real Qwen vocabulary and chat template either way."""
    tasks: tuple[str, ...] = ("click-test",)
    """The tasks GRPO trains (and the base policy is evaluated) on. click-test by default: it needs no
    eyes, so the curve shows what the loop learns (click-button needs visual grounding the tiny model
    does not get within the budget: docs/learning.md)."""
    demo_tasks: tuple[str, ...] = ()
    """The tasks demonstrated for SFT; empty: the same as ``tasks``."""
    demo_seeds: int = 24
    """Oracle demonstrations per task (one layout each)."""
    drawn_demos: int = 0
    """First screens drawn from the recorded demonstrations' for SFT, on layouts of their own
    (``consumers.trainer.sft.drawn``; click-box only): the agent's real first prompt, the screen redrawn,
    the click moved. 16 recorded click-box demonstrations left the small model clicking the target on 0
    of 8 held-out layouts; 1,200 drawn screens, offline, on 0.59 of 32 (docs/learning.md)."""
    drawn_epochs: int = 2
    """Passes over the drawn screens (with the recorded samples), one sample a step, before SFT proper
    (which then trains the recorded demonstrations alone, probed as ever). Measured on ``small`` (seed
    209): after one pass the greedy first click was at the blind rate (3 of 16), after two on the target
    12 of 16; but the later turns (``done``), trained only by the recorded demonstrations, 1 sample in
    76, were lost until 4 epochs on those alone (100 s) brought them back: 12 of 16 episodes succeeded."""
    drawn_batch_size: int = 1
    eval_episodes: int = 4
    """Episodes per task that measure the base policy, before SFT."""
    sft_epochs: int = 30
    """The most SFT epochs; ``sft_target_nll`` ends it first."""
    sft_target_nll: float | None = 0.12
    """The floor: SFT stops here if the probe has not ended it (0.12 is past where every seed measured
    so far started GRPO above ``sft_start_success``)."""
    sft_start_success: float | None = 0.25
    """A warm start, not a solution: SFT ends once the policy's own sampled episodes (GRPO's sampling, on
    layouts neither SFT nor GRPO sees) succeed this often. Ended by the demonstrations' NLL instead (at
    0.18-0.19), three seeds started GRPO at 0.33, 0.58 and 0.75: only the first climbed; from the others
    it lost ground or had no room (docs/learning.md). At a quarter, most groups of four are mixed, and
    mixed groups are GRPO's only signal."""
    sft_probe_nll: float = 0.25
    """Probing starts once the demonstrations' NLL is this low, so the early epochs cost no episodes
    (every probe at NLL 0.26-0.27, five runs over three seeds, saw 0 of 16 succeed)."""
    probes_per_epoch: int = 2
    """Probes per SFT epoch (halfway and at its end). Judged once an epoch, where SFT stopped was coarse:
    one epoch took seeds from 6 % to 69 % and from 6 % to 56 %, and those starts left GRPO no room to
    rise by 0.2 (docs/learning.md)."""
    probe_episodes: int = 16
    """Sampled episodes per probe (~1 min on 2 cores)."""
    sft_lr: float = 1e-3
    steps: int = 200
    """In practice the time budget ends the run first."""
    group_size: int = TRAINER_DEFAULTS["group_size"]
    groups_per_step: int = TRAINER_DEFAULTS["groups_per_step"]
    lr: float = 3e-4
    """With the failed episodes' pushes in the loss (``negative_scale`` 1), at 1e-4 and above a step
    moved the tiny policy by 1e-2 to 4e-2 nat per token and the reward fell, so 3e-5 it was — ~35
    steps of AdamW at 3e-5 move a weight about as far as one SFT step (lr 1e-3). Reinforcing only
    the winners is SFT on the policy's own successes, and takes SFT-like steps: two seeds of three rose
    by 0.33; on the third, single steps at 3e-4 sometimes broke the format and the KL pulled it back
    (docs/learning.md)."""
    kl_coef: float = 0.3
    """trainer.kl_coef: the k3 KL to the SFT weights in GRPO's loss (0: off). Without it, two runs from
    the same SFT weights (seed 1) lost the format: mean reward over the first 10 steps -> the last 10,
    0.38 -> 0.20 and 0.42 -> 0.19; with 0.3, 0.41 -> 0.45 — held, though not climbing. It is applied on
    every step, so a policy one update knocked off its format is pulled back (docs/learning.md)."""
    negative_scale: float = 0.0
    """trainer.negative_scale: the weight of the advantages below a group's mean (1: GRPO; 0: only the
    episodes that beat it are reinforced). A failed click-test episode is a stray digit followed by
    turns of garbage in contexts SFT never showed; pushing all of that down moved the policy (KL 0.1-0.2
    per token after 35 steps) without raising its reward. The winners alone are clean replies whose
    uncertain tokens are the decisions that won (docs/learning.md)."""
    lr_warmup_steps: int = 10
    """trainer.lr_warmup_steps: GRPO's lr ramps linearly to ``lr`` over its first 10 steps. Without it
    the first update at 3e-4 took seed 3 from 0.38 to 0.88 in one step (AdamW's first update moves every
    weight by the full lr, whatever its gradient), so the steps the goal calls "just after SFT" were
    already past it; ramped, the policies of the first three steps are at most 0.3 of one full step from
    SFT's (docs/learning.md)."""
    passes: int = TRAINER_DEFAULTS["passes"]
    """Optimizer updates per GRPO step on its batch (GRPO's μ)."""
    loss_reduction: str = TRAINER_DEFAULTS["loss_reduction"]
    """trainer.loss_reduction. ``token`` (DAPO) goes with ``max_parse_errors``: a failed episode is then
    short, and under ``episode`` its prefix tokens would outweigh a rewarded episode's."""
    temperature: float = TRAINER_DEFAULTS["temperature"]
    """GRPO's (and the evaluation's) sampling temperature: the policy's own distribution. A tiny model's
    reply is one long JSON object and an unlikely token derails it: that is what GRPO learns to avoid."""
    top_k: int = TRAINER_DEFAULTS["top_k"]
    """GRPO's (and the evaluation's) sampling keeps the ``top_k`` likeliest tokens (-1: all)."""
    min_p: float = 0.1
    """GRPO's (and the evaluation's) sampling drops tokens less likely than ``min_p`` times the
    likeliest (0: none). After a short SFT a handful of stray tokens (`` Inflate``, ``张家``) compete
    with the digits of a coordinate and one of them derails the reply; unfiltered, the ~150k other
    tokens add their tail to those. Filtered, the same weights solved 8 of 24 episodes instead of 1
    (docs/learning.md); from there GRPO rose on one seed of three."""
    turns: int = 4
    max_parse_errors: int | None = None
    """producer.max_parse_errors: with 1, an episode ends at its first reply that does not parse (of 158
    rewarded episodes of a run without it, 1 had recovered from one). Measured with the token loss over 3
    seeds: +0.04, +0.13, +0.38 against +0.21, +0.29, +0.04 without; the same mean, so not the default
    (docs/learning.md)."""
    concurrency: int = PRODUCER_DEFAULTS["concurrency"]
    max_new_tokens: int = 96
    """The oracle's replies are ~40-70 tokens."""
    window: int = 3
    """Steps averaged at each end of the curve (the goal compares the first and last ``window``)."""
    budget_minutes: float = 30.0
    """The whole run's bound: GRPO takes no new step once the run is this old, less the room kept for its
    last step, its evaluation and the curve (``cua_stream.app.learn.grpo.grpo_deadline``)."""
    grpo_minutes: float | None = None
    """GRPO's own time bound, counted from its start (None: only the whole run's budget bounds it). With
    drawn demonstrations SFT alone takes most of an hour on ``small``; this gives the curve a fixed
    length whatever the warm start cost (the goal: the curve's last steps against its first within an
    hour)."""

    def __post_init__(self) -> None:
        if problem := plan_problem(self):
            raise ValueError(problem)

    @property
    def demonstrated(self) -> tuple[str, ...]:
        return self.demo_tasks or self.tasks

    def demo_layouts(self) -> list[int]:
        base = SEED_SPACE + self.seed * 10 * EVAL_OFFSET
        return [base + i for i in range(self.demo_seeds)]

    def drawn_layouts_from(self) -> int:
        """The drawn screens' first layout seed: the demonstrations' block, one ``EVAL_OFFSET`` on (so
        apart from the recorded ones, every other ``--seed``'s, GRPO's and the evaluations')."""
        return SEED_SPACE + self.seed * 10 * EVAL_OFFSET + EVAL_OFFSET

    def evaluation_plan(self) -> EvalPlan:
        """The base, SFT and GRPO policies' evaluation: ``eval_episodes`` held-out layouts per task."""
        return self._eval_plan(eval_seeds(0, self.eval_episodes))

    def probe_plan(self) -> EvalPlan:
        """An SFT probe's: the same layouts at every probe (its epochs compare on one set), apart from
        demonstrations, evaluations and GRPO's."""
        return self._eval_plan(eval_seeds(PROBE_FIRST, self.probe_episodes))

    def _eval_plan(self, seeds: list[int]) -> EvalPlan:
        return EvalPlan(tasks=tuple(TaskRef(name=t) for t in self.tasks), samples=1, seeds=tuple(seeds))

    def warm_enough(self, success: float) -> bool:
        """Whether a probe's success rate ends SFT."""
        return self.sft_start_success is not None and success >= self.sft_start_success

    def trainer_settings(self) -> dict[str, Any]:
        return {
            "tasks": list(self.tasks),
            "group_size": self.group_size,
            "groups_per_step": self.groups_per_step,
            "max_staleness": 1,
            "max_steps": self.steps,
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "lr": self.lr,
            "lr_warmup_steps": self.lr_warmup_steps,
            "passes": self.passes,
            "kl_coef": self.kl_coef,
            "negative_scale": self.negative_scale,
            "loss_reduction": self.loss_reduction,
            "group_timeout_s": 900.0,
        }

    def producer_settings(self) -> dict[str, Any]:
        settings = {"concurrency": self.concurrency, "max_turns": self.turns, "drain_timeout_s": 120.0}
        if self.max_parse_errors is not None:
            settings["max_parse_errors"] = self.max_parse_errors
        return settings


@dataclass(frozen=True)
class Curve:
    """Mean reward per training step, overall and per task (discarded episodes count as no reward: they
    are not the policy's doing, and the trainer dropped their groups)."""

    steps: list[int] = field(default_factory=list)
    overall: list[float] = field(default_factory=list)
    by_task: dict[str, list[float | None]] = field(default_factory=dict)
    """Per task, one value per step (None: no episode of the task in that step)."""
    valid: list[float] = field(default_factory=list)
    """Per step, the share of its episodes' replies that carry a computer-1 action (JSON with an
    ``action`` naming a ``type``): the format SFT teaches, which GRPO must keep."""

    def ends(self, window: int) -> tuple[float, float]:
        """Mean reward of the first and of the last ``window`` steps."""
        return _ends(self.overall, window)

    def valid_ends(self, window: int) -> tuple[float, float]:
        """Share of replies with a valid action over the first and the last ``window`` steps."""
        return _ends(self.valid, window)


def _ends(values: Sequence[float], window: int) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values[:window]), statistics.fmean(values[-window:])


def reward_curve(
    steps: Iterable[TrainStep],
    work: Iterable[WorkRequest],
    scores: Iterable[ScoreEvent],
    replies: Mapping[str, Sequence[str]] | None = None,
) -> Curve:
    """Reward per step from the steps' groups, their tasks (work topic) and their rewards (score topic);
    with ``replies`` (group → its episodes' reply texts), the share of valid actions per step."""
    task_of = {w.group_id: w.task.name for w in work}
    rewards: dict[str, list[float]] = {}
    for s in scores:
        if isinstance(s.verdict, Reward):
            rewards.setdefault(s.group_id, []).append(s.verdict.value)
    ordered = sorted(steps, key=lambda s: s.step)
    tasks = sorted({task_of[g] for s in ordered for g in s.group_ids if g in task_of})
    curve = Curve(by_task={t: [] for t in tasks})
    for step in ordered:
        per_task: dict[str, list[float]] = {t: [] for t in tasks}
        for group in step.group_ids:
            if group in task_of:
                per_task[task_of[group]] += rewards.get(group, [])
        values = [v for vs in per_task.values() for v in vs]
        if not values:
            continue
        curve.steps.append(step.step)
        curve.overall.append(statistics.fmean(values))
        texts = [t for g in step.group_ids for t in (replies or {}).get(g, ())]
        curve.valid.append(sum(reply_action(t) is not None for t in texts) / len(texts) if texts else 0.0)
        for t in tasks:
            curve.by_task[t].append(statistics.fmean(per_task[t]) if per_task[t] else None)
    return curve


def success_by_task(work: Sequence[WorkRequest], scores: Mapping[str, ScoreEvent]) -> dict[str, float]:
    """The share of ``work``'s episodes per task that earned a reward of 1."""
    out: dict[str, list[float]] = {}
    for w in work:
        s = scores.get(w.episode_id)
        won = s is not None and isinstance(s.verdict, Reward) and s.verdict.value >= 1.0
        out.setdefault(w.task.name, []).append(1.0 if won else 0.0)
    return {t: statistics.fmean(v) for t, v in out.items()}


def evaluation_entry(results: EvalResults, path: str) -> dict[str, object]:
    """An evaluation as ``curve.json`` holds it: its run and results file, and per task and overall the
    success rate with its 95 % Wilson interval (the file has every episode)."""
    return {
        "run_id": results.run_id,
        "results": path,
        "by_task": {task: _rate(s) for task, s in by_task(results.episodes).items()},
    }


def _rate(s: Summary) -> dict[str, float | int | None]:
    return {"success": s.success_rate, "low": s.interval.low, "high": s.interval.high,
            "successes": s.successes, "scored": s.scored, "episodes": s.episodes}  # fmt: skip


def overall(results: EvalResults) -> Summary:
    return by_task(results.episodes)[OVERALL]
