"""Supervised fine-tuning on demonstrations: which episodes are demonstrations, their samples, the
batches, and the loss. Pure (torch tensors in, a scalar out; no model, no I/O).

A demonstration is an episode recorded with forced completions (``record-oracle``) whose verdict is a
reward of at least ``min_reward``; only the calls of the scored attempt count (an attempt cut by a
crash left calls no verdict covers). Its samples come from ``samples.assemble``, the assembly GRPO
uses: the same lineages, the same loss masks (completion tokens only, each trained once), the same
images. So SFT warms the policy up on exactly the token layout GRPO later trains.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from consumers.trainer.episodes.samples import Sample, assemble
from cua_stream.config import BusConfig, ConfigError, require_model_dir, state_dir
from cua_stream.events import CallRecord, Reward, ScoreEvent

if (
    TYPE_CHECKING
):  # torch only for the loss: the config (and --help, which shows its defaults) does not load it
    import torch


class SftConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``cua-stream sft`` (section ``sft``; env ``CUA_SFT_<FIELD>``)."""

    run_ids: list[str]
    """The demonstration runs to train on (``record-oracle``'s run ids)."""
    model_path: str
    """The starting weights and the processor."""
    out_dir: str = ""
    """Where the fine-tuned model (weights and processor: an engine starts from it) goes; empty:
    ``<state dir>/sft/<first run id>``."""
    epochs: int = 8
    """Passes over the demonstrations; with ``target_nll``, the most."""
    target_nll: float | None = None
    """Stop at the end of the first epoch after which the demonstrations' mean token NLL is at or below
    this: a warm start measured by where it leaves the policy, not by how long it trained (the same
    epoch count leaves a different NLL on another set of demonstrations)."""
    batch_size: int = 4
    """Samples per optimizer step."""
    lr: float = 1e-4
    """AdamW's learning rate."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before each optimizer step."""
    temperature: float = 1.0
    """Logprobs are taken at the training temperature, as GRPO takes them."""
    min_reward: float = 1.0
    """The least reward an episode's verdict gives for it to be a demonstration."""
    max_seq_len: int = 32768
    """The longest sample trained, in tokens: a longer one is cut at a call boundary, as GRPO cuts it."""
    seed: int = 0
    """Seeds torch and the batches' order in each epoch."""
    blob_dir: str = ""
    """The blob store the gateway wrote the screenshots to; empty: ``<state dir>/blobs``."""
    drawn: int = 0
    """First screens to draw from the demonstrations' (``consumers.trainer.sft.drawn``), one per layout
    seed from ``drawn_seed`` on: the recorded first call replayed on a new layout, its screen redrawn and
    its click moved. Only tasks whose page can be redrawn (``tasks.redraw.DRAWABLE_TASKS``)."""
    drawn_seed: int = 2**39
    """The drawn screens' first layout seed: between GRPO's (CRC-32s, below 2^32) and the evaluations'
    (2^40 and up), so no drawn layout is one a policy is trained or measured on."""
    bus: BusConfig = BusConfig()
    """Filled from the ``[bus]`` section: where the demonstration runs' records are read."""

    def __post_init__(self) -> None:
        if not self.run_ids or not all(self.run_ids):
            raise ConfigError("sft.run_ids: name at least one demonstration run")
        require_model_dir("sft.model_path", self.model_path)
        for name in ("epochs", "batch_size", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"sft.{name}: must be >= 1")
        if self.lr <= 0 or self.temperature <= 0:
            raise ConfigError("sft.lr and sft.temperature: must be > 0")
        if self.target_nll is not None and self.target_nll <= 0:
            raise ConfigError("sft.target_nll: must be > 0 (or unset: train all the epochs)")
        if self.drawn < 0 or self.drawn_seed < 0:
            raise ConfigError("sft.drawn and sft.drawn_seed: must be >= 0")

    @property
    def out(self) -> Path:
        return Path(self.out_dir) if self.out_dir else state_dir() / "sft" / self.run_ids[0]

    @property
    def blobs(self) -> str:
        return self.blob_dir or str(state_dir() / "blobs")


@dataclass(frozen=True)
class Demonstrations:
    samples: tuple[Sample, ...]
    episodes: int
    """Demonstration episodes (rewarded) the samples come from."""
    rejected: dict[str, int]
    """Episodes of the runs left out, by why (their verdict, or ``no calls``)."""
    firsts: tuple[CallRecord, ...] = ()
    """Each demonstration episode's first call (what ``drawn`` draws from)."""
    drawn: int = 0
    """Of ``samples``, how many were drawn (the last ones)."""


def demonstrations(
    scores: Iterable[ScoreEvent],
    calls: Iterable[CallRecord],
    *,
    min_reward: float = 1.0,
    max_seq_len: int | None = None,
) -> Demonstrations:
    """The samples of the rewarded episodes' scored attempts."""
    by_attempt: dict[tuple[str, int], list[CallRecord]] = {}
    for call in calls:
        by_attempt.setdefault((call.episode_id, call.attempt), []).append(call)
    samples: list[Sample] = []
    firsts: list[CallRecord] = []
    rejected: dict[str, int] = {}
    episodes = 0
    for score in sorted(scores, key=lambda s: s.episode_id):
        v = score.verdict
        why = ""
        if not isinstance(v, Reward):
            why = f"discard: {v.reason}"
        elif v.value < min_reward:
            why = f"reward {v.value:g}"
        elif not (mine := by_attempt.get((score.episode_id, score.attempt))):
            why = "no calls"
        if why:
            rejected[why] = rejected.get(why, 0) + 1
            continue
        episodes += 1
        samples.extend(assemble(mine, max_seq_len=max_seq_len).samples)
        firsts.append(min(mine, key=lambda c: c.seq))
    return Demonstrations(tuple(samples), episodes, rejected, tuple(firsts))


def worth_measuring(epoch_loss: float, target_nll: float | None) -> bool:
    """Whether to measure the demonstrations' NLL after an epoch whose mean training loss was
    ``epoch_loss``: a forward pass over them costs a third of an epoch, and the running loss (taken
    while the weights still improved) has stayed above the end-of-epoch NLL, so far above the target the
    measure cannot reach it."""
    return target_nll is not None and epoch_loss <= 2 * target_nll


def batches(n: int, batch_size: int, epoch: int, seed: int) -> list[list[int]]:
    """Sample indices of one epoch, shuffled from ``(seed, epoch)``, cut into batches."""
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def sft_loss(logprobs: Sequence[torch.Tensor], masks: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Cross-entropy on the trained (completion) tokens: minus their mean logprob over the batch, and
    how many there were. ``logprobs[i]`` and ``masks[i]`` are sample i's per-token values."""
    import torch

    logp = torch.cat(list(logprobs))
    mask = torch.cat(list(masks)).to(logp.dtype)
    n = int(mask.sum())
    return -(logp * mask).sum() / max(n, 1), n
