"""Running SFT: read the demonstrations from the topics, train, save a model an engine starts from."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

from consumers.trainer.episodes.samples import Sample
from consumers.trainer.sft.demonstrations import (
    Demonstrations,
    SftConfig,
    batches,
    demonstrations,
    worth_measuring,
)
from cua_stream.blobs import open_blob_store
from cua_stream.bus.reader import scan
from cua_stream.events import CallRecord, ScoreEvent, WorkRequest
from cua_stream.topics import SCORES, SUMMARIES, TURNS, WORK

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpochStats:
    epoch: float
    """The epoch (1, 2, ...); a probe within one says how far into it (8.5: halfway through the 9th)."""
    loss: float
    """Mean of the epoch's step losses (mean negative logprob of a demonstration token)."""
    tokens: int
    seconds: float
    nll: float | None = None
    """The demonstrations' mean token NLL after the epoch, when it was measured (``target_nll``)."""

    def said(self, of: int | None = None) -> str:
        """The epoch's line for a log (``of``: the most epochs)."""
        which = f"{self.epoch:g}" + (f"/{of}" if of else "")
        line = f"epoch {which}: loss {self.loss:.3f} over {self.tokens} tokens ({self.seconds:.1f} s)"
        return line + ("" if self.nll is None else f"; NLL after it {self.nll:.3f}")


@dataclass(frozen=True)
class SftResult:
    out: Path
    samples: int
    episodes: int
    nll_before: float
    nll_after: float
    epochs: list[EpochStats]
    reached_target: bool = False
    """``target_nll`` ended the training before the last epoch (or at it)."""
    probed_enough: bool = False
    """A ``Probe`` judged the weights enough and ended the training."""


@dataclass(frozen=True)
class Probe:
    """Ends SFT on a measured start rather than a loss: after each epoch that leaves the demonstrations'
    NLL at or below ``from_nll``, the weights are saved and ``enough`` judges them (``learn`` samples
    episodes with them). The NLL says how well the demonstrations are copied; what GRPO needs is how often
    the policy's own samples succeed, and the same NLL left that anywhere from 0.33 to 0.75."""

    from_nll: float
    enough: Callable[[Path, EpochStats], bool]
    per_epoch: int = 1
    """Judgements per epoch, at equal shares of its batches (the last at its end). One epoch of
    ``learn``'s SFT took a seed's sampled success from 6 % to 69 %: judged once an epoch, where SFT
    stops is that coarse."""

    def __post_init__(self) -> None:
        if self.per_epoch < 1:
            raise ValueError(f"per_epoch: 1 or more, not {self.per_epoch}")

    def points(self, batches: int) -> set[int]:
        """After how many of an epoch's ``batches`` to judge (its end included)."""
        return {max(1, round(batches * k / self.per_epoch)) for k in range(1, self.per_epoch + 1)}


MEASURED_DRAWN = 64
"""Drawn samples in the NLL that ends SFT (``_measured``)."""


def _measured(demos: Demonstrations) -> tuple[Sample, ...]:
    """The samples whose NLL ends SFT: every recorded one and the first ``MEASURED_DRAWN`` drawn ones.
    A forward pass over 1,200 drawn screens takes ~5 min on the small model, and the NLL is measured
    after every epoch and probe; 64 of them (~15 s) say as much of how well the clicks are copied."""
    recorded = len(demos.samples) - demos.drawn
    return demos.samples[: recorded + MEASURED_DRAWN]


async def read_demonstrations(config: SftConfig) -> Demonstrations:
    """The runs' rewarded episodes from the score, turn and summary topics (everything up to now)."""
    runs = set(config.run_ids)
    scores = [d.event async for d in scan(config.bus, SCORES) if d.event.run_id in runs]
    calls: list[CallRecord] = []
    for spec in (TURNS, SUMMARIES):
        calls += [d.event async for d in scan(config.bus, spec) if d.event.run_id in runs]
    demos = demonstrations(
        [s for s in scores if isinstance(s, ScoreEvent)],
        calls,
        min_reward=config.min_reward,
        max_seq_len=config.max_seq_len,
    )
    return await _with_drawn(config, demos) if config.drawn else demos


async def _with_drawn(config: SftConfig, demos: Demonstrations) -> Demonstrations:
    """``demos`` and ``config.drawn`` first screens drawn from theirs (the runs' work requests say which
    task and layout each demonstration played)."""
    import dataclasses

    from transformers import AutoTokenizer

    from consumers.trainer.sft.drawn import draw, drawable
    from cua_stream.identity import layout_seed

    runs = set(config.run_ids)
    played = {
        w.episode_id: (w.task.name, layout_seed(w))
        async for d in scan(config.bus, WORK)
        if isinstance(w := d.event, WorkRequest) and w.run_id in runs
    }
    bases = [b for c in demos.firsts if c.episode_id in played and (b := drawable(c, *played[c.episode_id]))]
    seeds = range(config.drawn_seed, config.drawn_seed + config.drawn)
    drawn = draw(
        bases, seeds, open_blob_store(config.blobs), AutoTokenizer.from_pretrained(config.model_path)
    )
    log.info(
        "drew %d first screens from %d demonstrations (%d without the target on screen)",
        len(drawn.samples),
        drawn.bases,
        drawn.unseen,
    )
    return dataclasses.replace(demos, samples=demos.samples + drawn.samples, drawn=len(drawn.samples))


def train(
    config: SftConfig,
    demos: Demonstrations,
    on_epoch: Callable[[EpochStats], None] = lambda _: None,
    probe: Probe | None = None,
) -> SftResult:
    """``config.epochs`` passes over the demonstrations, or fewer when ``config.target_nll`` is reached
    or ``probe`` judges the weights enough; the model (with its processor) saved to ``config.out``."""
    import torch

    from consumers.trainer.backends.torch_backend import TorchBackend

    torch.manual_seed(config.seed)
    backend = TorchBackend(
        config.model_path,
        open_blob_store(config.blobs),
        temperature=config.temperature,
        lr=config.lr,
        max_grad_norm=config.max_grad_norm,
    )
    samples = demos.samples
    measured = _measured(demos)
    before = backend.nll(measured)
    epochs: list[EpochStats] = []

    def judged(stats: EpochStats) -> bool:
        """Whether ``probe`` ends SFT at weights whose NLL ``stats`` holds (saved first, for it to load)."""
        if probe is None or stats.nll is None or stats.nll > probe.from_nll:
            return False
        return probe.enough(backend.save(config.out, processor=True), stats)

    for epoch in range(1, config.epochs + 1):
        started = time.perf_counter()
        losses, tokens = [], 0
        order = batches(len(samples), config.batch_size, epoch, config.seed)
        within = probe.points(len(order)) - {len(order)} if probe is not None else set()
        for done, batch in enumerate(order, 1):
            loss, n, _ = backend.sft_step([samples[i] for i in batch])
            losses.append(loss)
            tokens += n
            if done in within and probe is not None and worth_measuring(fmean(losses), probe.from_nll):
                seconds, nll = time.perf_counter() - started, backend.nll(measured)
                part = EpochStats(epoch - 1 + done / len(order), fmean(losses), tokens, seconds, nll)
                if judged(part):
                    return SftResult(config.out, len(samples), demos.episodes, before, part.nll or 0.0,
                                     [*epochs, part], probed_enough=True)  # fmt: skip
        loss = fmean(losses)
        measure = worth_measuring(loss, config.target_nll) or (
            probe is not None and worth_measuring(loss, probe.from_nll)
        )
        nll = backend.nll(measured) if measure else None
        stats = EpochStats(epoch, loss, tokens, time.perf_counter() - started, nll)
        epochs.append(stats)
        on_epoch(stats)
        if nll is not None and config.target_nll is not None and nll <= config.target_nll:
            break
        if judged(stats):
            return SftResult(config.out, len(samples), demos.episodes, before, nll or 0.0, epochs,
                             probed_enough=True)  # fmt: skip
    after = epochs[-1].nll if epochs and epochs[-1].nll is not None else backend.nll(measured)
    reached = config.target_nll is not None and after <= config.target_nll
    out = backend.save(config.out, processor=True)
    return SftResult(out, len(samples), demos.episodes, before, after, epochs, reached)
