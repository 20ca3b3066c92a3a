"""The off-policy bound per token (``trainer.on_stale = "mask"``). Pure: no I/O, no torch.

By default a group whose oldest trained token lags the trainer by more than ``max_staleness`` versions
is dropped whole (``groups.decide``, ``state.stale_in_queue``). With ``on_stale = "mask"`` it trains
instead, and only its tokens past the bound are taken out of the loss: their loss mask becomes 0 (they
stay in the sequence, as context the fresh tokens were sampled in), their rollout logprob 0.0 as for any
untrained token. A call sampled across weight updates (``in_place``, ``retract``) keeps its newer part.
A sample left with no trained token is left out of the step (a forward pass for nothing); a group left
with none at all is still dropped as ``stale``.

The mask is applied when the step is built, at the version being trained, so a group that waited in the
queue across a step loses the tokens that aged past the bound while it waited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from consumers.trainer.episodes.samples import NO_VERSION, Sample
from cua_stream.events import Logprobs
from cua_stream.versions import too_stale


def fresh_mask(loss_mask: bytes, token_versions: Sequence[int], *, version: int, bound: int | None) -> bytes:
    """``loss_mask`` with 0 on every token sampled by a weight version that lags ``version`` by more than
    ``bound`` (None: no bound, the mask as it is). Tokens without a version (``NO_VERSION``: prompts)
    are untrained already and stay so."""
    if len(loss_mask) != len(token_versions):
        raise ValueError(f"{len(loss_mask)} mask entries for {len(token_versions)} token versions")
    return bytes(
        1 if trained and not (v != NO_VERSION and too_stale(version, v, bound)) else 0
        for trained, v in zip(loss_mask, token_versions, strict=True)
    )


def mask_stale(sample: Sample, *, version: int, bound: int | None) -> tuple[Sample | None, int]:
    """``sample`` with its tokens past the bound untrained, and how many were masked; None for the
    sample when none of its trained tokens is left."""
    mask = fresh_mask(sample.loss_mask, sample.token_versions, version=version, bound=bound)
    masked = sum(sample.loss_mask) - sum(mask)
    if not masked:
        return sample, 0
    if not any(mask):
        return None, masked
    logprobs = Logprobs(lp if keep else 0.0 for lp, keep in zip(sample.rollout_logprobs, mask, strict=True))
    return dataclasses.replace(sample, loss_mask=mask, rollout_logprobs=logprobs), masked


def mask_episodes(
    samples: Mapping[str, Iterable[Sample]], *, version: int, bound: int | None
) -> tuple[dict[str, tuple[Sample, ...]], int]:
    """Each episode's samples through ``mask_stale`` (those left with nothing to train left out), and
    how many tokens were masked in all."""
    out: dict[str, tuple[Sample, ...]] = {}
    total = 0
    for episode_id, episode in samples.items():
        kept: list[Sample] = []
        for sample in episode:
            masked_sample, masked = mask_stale(sample, version=version, bound=bound)
            total += masked
            if masked_sample is not None:
                kept.append(masked_sample)
        out[episode_id] = tuple(kept)
    return out, total


def newest_trained_version(samples: Iterable[Sample]) -> int | None:
    """The newest weight version among the tokens ``samples`` train (None: no trained token has one).
    Under ``on_stale = "mask"`` a group trains while this one is within the bound."""
    versions = [
        v
        for s in samples
        for v, m in zip(s.token_versions, s.loss_mask, strict=True)
        if m and v != NO_VERSION
    ]
    return max(versions, default=None)
