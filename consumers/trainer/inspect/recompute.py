"""A past step measured again, beside its record: ``cua-stream inspect step --recompute``. Pure: the
caller loads the weights the step started from, runs the trainer's own backend over the rebuilt batch
(``TorchBackend.measure``) and hands in the numbers.

Two questions, from the log alone:

- Does the step replay? The loss, logprob gap, KL and grad norm the backend computes now from version
  N-1's weights equal the ``TrainStep``'s (within floating-point tolerance): the weights, the batch and
  the loss are the ones the step had. A difference says one of them is not.
- Where do the trainer and the engine disagree? The trained tokens with the largest |trainer logprob -
  engine logprob| (the inject-and-compare check): a wide gap on a few tokens points at a template or
  tokenisation difference, a gap spread over every token at numerics or a weights mismatch.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from consumers.trainer.episodes.samples import Sample
from consumers.trainer.inspect.step import StepBatch
from cua_stream.events import TrainStep
from cua_stream.versions import trained_from

REL_TOL = 1e-4
ABS_TOL = 1e-6
"""Float32 on CPU repeats the same operations in the same order, so the two agree to a few ulps; the
margin allows another thread count or BLAS build (a different weights version moves them by far more)."""

COMPARED = ("loss", "logprob_gap", "grad_norm", "kl", "clip_fraction", "trained_tokens")


@dataclass(frozen=True)
class MetricCheck:
    name: str
    recorded: float | None
    """None: the step record does not hold it (an older trainer's)."""
    recomputed: float
    agrees: bool | None
    """None: not comparable (``note`` says why)."""
    note: str = ""


@dataclass(frozen=True)
class TokenGap:
    """One trained token: the trainer's logprob of it now and the one the engine recorded when sampling."""

    episode_id: str
    leaf_call_id: str
    position: int
    token_id: int
    trainer: float
    engine: float
    version: int
    """The weights version the engine sampled it with."""

    @property
    def delta(self) -> float:
        return self.trainer - self.engine


@dataclass(frozen=True)
class Recomputation:
    start_version: int
    checks: tuple[MetricCheck, ...]
    gaps: tuple[TokenGap, ...]

    @property
    def agrees(self) -> bool:
        return all(c.agrees is not False for c in self.checks)


def batch_items(batch: StepBatch) -> list[tuple[Sample, float, int]]:
    """(sample, advantage, episode index) of each sample the step trained, in the trainer's order: group
    by group, each group's episodes in its decision's order, an index per episode given an advantage
    (``Trainer._step`` packs them so)."""
    items: list[tuple[Sample, float, int]] = []
    episode = 0
    for group in batch.groups:
        if group.decision is None:
            continue
        samples = {e.episode_id: e.samples for e in group.episodes}
        for episode_id, advantage in group.decision.advantages.items():
            items += [(sample, advantage, episode) for sample in samples.get(episode_id, ())]
            episode += 1
    return items


def recorded_metrics(step: TrainStep) -> dict[str, float]:
    return {"loss": step.loss, **{k: v for k, v in step.metrics.items() if k in COMPARED}}


def compare(
    step: TrainStep, recomputed: Mapping[str, float], *, passes: int, rel_tol: float = REL_TOL
) -> list[MetricCheck]:
    """Each of ``COMPARED`` recomputed beside the step's record. With ``passes`` > 1 the record's clip
    fraction is its last pass's (the weights then are not kept), so it is shown, not compared."""
    recorded = recorded_metrics(step)
    checks = []
    for name in COMPARED:
        if name not in recomputed:
            continue
        mine, theirs = recomputed[name], recorded.get(name)
        if theirs is None:
            checks.append(MetricCheck(name, None, mine, None, "not in the step record"))
        elif name == "clip_fraction" and passes > 1:
            checks.append(MetricCheck(name, theirs, mine, None, f"the record's is pass {passes}'s"))
        else:
            agrees = math.isclose(mine, theirs, rel_tol=rel_tol, abs_tol=ABS_TOL)
            checks.append(MetricCheck(name, theirs, mine, agrees))
    return checks


def widest_gaps(
    samples: Sequence[Sample], trainer_logprobs: Sequence[Sequence[float]], k: int
) -> list[TokenGap]:
    """The ``k`` trained tokens where ``trainer_logprobs`` (one list per sample, a logprob per token) and
    the engine's rollout logprobs differ most, widest first (ties: in token order)."""
    if len(samples) != len(trainer_logprobs):
        raise ValueError(f"{len(samples)} samples but {len(trainer_logprobs)} logprob lists")
    gaps = (
        TokenGap(
            episode_id=sample.episode_id,
            leaf_call_id=sample.leaf_call_id,
            position=i,
            token_id=int(sample.tokens[i]),
            trainer=float(mine[i]),
            engine=float(sample.rollout_logprobs[i]),
            version=int(sample.token_versions[i]),
        )
        for sample, mine in zip(samples, trainer_logprobs, strict=True)
        for i, trained in enumerate(sample.loss_mask)
        if trained and i > 0  # the first token is predicted by nothing (the trainer never trains it)
    )
    return heapq.nlargest(k, gaps, key=lambda g: abs(g.delta))


def recomputation(
    batch: StepBatch,
    recomputed: Mapping[str, float],
    trainer_logprobs: Sequence[Sequence[float]],
    *,
    passes: int,
    top_k: int,
) -> Recomputation:
    """The comparison ``inspect step --recompute`` shows: ``recomputed`` (the metrics) and
    ``trainer_logprobs`` (per sample of ``batch_items(batch)``, in that order) beside the record."""
    samples = [sample for sample, _, _ in batch_items(batch)]
    return Recomputation(
        start_version=trained_from(batch.step.policy_version),
        checks=tuple(compare(batch.step, recomputed, passes=passes)),
        gaps=tuple(widest_gaps(samples, trainer_logprobs, top_k)),
    )
