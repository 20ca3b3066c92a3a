"""A step's batch as the backend's items: each queued group's samples (their tokens past the bound
masked out under ``trainer.on_stale = "mask"``, at the version being trained), each with its episode's
advantage and the episode's index in the step. Pure."""

from __future__ import annotations

from consumers.trainer.backends.torch_backend import TrainItem
from consumers.trainer.grpo.stale_mask import mask_episodes
from consumers.trainer.state import Queued


def train_items(
    batch: list[Queued], *, version: int, mask_bound: int | None, mask: bool
) -> tuple[list[TrainItem], int]:
    """The items to train, and how many tokens were masked for staleness (0 unless ``mask``)."""
    items: list[TrainItem] = []
    episode = masked_total = 0
    for queued in batch:
        samples = queued.samples
        if mask:  # at the version trained: what aged in the queue is masked too
            samples, masked = mask_episodes(samples, version=version, bound=mask_bound)
            masked_total += masked
        for episode_id, advantage in queued.decision.advantages.items():
            items.extend(TrainItem(sample, advantage, episode) for sample in samples[episode_id])
            episode += 1
    return items, masked_total
