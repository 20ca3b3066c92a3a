"""A step's record (``TrainStep``): what it trained, its loss statistics and where its time went; and the
one line that describes it in logs and progress displays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from consumers.trainer.backends.torch_backend import StepStats
from consumers.trainer.episodes.samples import NO_VERSION, Sample
from consumers.trainer.state import Queued
from cua_stream.events import PolicyVersion, TrainStep
from cua_stream.versions import staleness


def policy_version(step: TrainStep, weights_path: str, published_at: float) -> PolicyVersion:
    """The version a step made, published with it: where its weights are."""
    return PolicyVersion(
        run_id=step.run_id,
        version=step.policy_version,
        weights_path=weights_path,
        step=step.step,
        published_at=published_at,
    )


def train_step(
    run_id: str,
    *,
    step: int,
    version: int,
    batch: list[Queued],
    stats: StepStats,
    lr: float,
    timings: Mapping[str, float],
    finished_at: float,
    stale_tokens: Mapping[int, int] | None = None,
    masked_stale_tokens: int = 0,
    retrain_of: str = "",
) -> TrainStep:
    return TrainStep(
        run_id=run_id,
        step=step,
        policy_version=version,
        n_groups=len(batch),
        n_episodes=stats.episodes,
        n_samples=stats.samples,
        loss=stats.loss.loss,
        group_ids=tuple(q.group.group_id for q in batch),
        metrics={
            "grad_norm": stats.grad_norm,
            "logprob_gap": stats.loss.logprob_gap,
            "clip_fraction": stats.loss.clip_fraction,
            "kl": stats.loss.kl,
            "trained_tokens": float(stats.loss.tokens),
            "masked_stale_tokens": float(masked_stale_tokens),  # past the bound (trainer.on_stale mask)
            "mean_reward": mean_reward(batch),
            "lr": lr,
            **timings,  # where the step's time went: wait_s, train_s (forward/backward), save_s, ...
            **{f"stale_tokens_{lag}": float(n) for lag, n in sorted((stale_tokens or {}).items())},
        },
        finished_at=finished_at,
        # the attempt of each trained episode: which of its outcomes (a retried episode has several)
        attempts={
            episode_id: score.attempt
            for q in batch
            for episode_id in q.decision.advantages
            if (score := q.group.episodes[episode_id].score) is not None
        },
        retrain_of=retrain_of,
    )


def token_staleness(samples: Iterable[Sample], version: int) -> dict[int, int]:
    """Trained tokens per staleness (versions behind ``version``, the weights being trained), counted
    per token: a call sampled across a weight update (``in_place``, ``retract``) counts each part at
    its own version; untrained tokens (prompts, a parent's completion trained elsewhere) count nothing."""
    counts: Counter[int] = Counter()
    for sample in samples:
        for v, trained in zip(sample.token_versions, sample.loss_mask, strict=True):
            if trained and v != NO_VERSION:
                counts[staleness(version, v)] += 1
    return dict(counts)


def mean_reward(batch: list[Queued]) -> float:
    rewards = [
        ep.score.verdict.value  # type: ignore[union-attr]
        for q in batch
        for eid, ep in q.group.episodes.items()
        if eid in q.decision.advantages and ep.score is not None
    ]
    return sum(rewards) / len(rewards) if rewards else 0.0


def describe_step(step: TrainStep) -> str:
    m = step.metrics
    return (
        f"v{step.policy_version}, {step.n_groups} group(s), {step.n_episodes} episodes, {step.n_samples} samples, "
        f"reward {m.get('mean_reward', 0):.2f}, loss {step.loss:.4f}, grad {m.get('grad_norm', 0):.3f}, "
        f"logprob gap {m.get('logprob_gap', 0):.2e}" + (f", KL {m['kl']:.2e}" if m.get("kl") else "")
    )
