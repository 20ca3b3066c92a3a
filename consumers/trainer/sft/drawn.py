"""Demonstrations drawn from recorded ones (issue O): a rewarded demonstration's first call — the agent's
real prompt with the first screenshot, and the oracle's click — replayed on layouts nobody played: the
screenshot's page repainted for the new layout (``tasks.redraw``) and the reply's click moved onto its
target. Everything else is the recorded call's: the same prompt tokens (the same instructions, chat
template and image pads: the screen keeps its size), so SFT on them trains exactly the context GRPO's
first turn samples in. Offline, 1,200 such screens taught the small model to click the target on 0.59
of real held-out screens, where 16 recorded demonstrations left it at 0 (docs/learning.md).

The choices are pure (which calls can be drawn from, the moved reply, the new record); ``draw`` reads
and writes the blob store."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from consumers.trainer.episodes.samples import Sample, assemble
from cua_stream.blobs import BlobStore
from cua_stream.events import CallRecord, ImageRef
from cua_stream.packed import Logprobs, TokenIds
from cua_stream.tasks.pages import Layout, layout
from cua_stream.tasks.redraw import DRAWABLE_TASKS, page_origin, redraw


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class Drawable:
    """A recorded first call to draw new ones from, and the layout its screenshot shows."""

    call: CallRecord
    seen: Layout


@dataclass(frozen=True)
class Drawn:
    samples: tuple[Sample, ...]
    bases: int
    """Recorded first screens the samples were drawn from."""
    unseen: int
    """Recorded first screens left out: their target is not on them (the page had not loaded)."""


def drawable(call: CallRecord, task: str, seed: int) -> Drawable | None:
    """``call`` as a base to draw from: an episode's first call (a root: its prompt is whole) with one
    screenshot, of a task whose page can be redrawn; None otherwise."""
    if call.parent_call_id is not None or len(call.images) != 1 or task not in DRAWABLE_TASKS:
        return None
    return Drawable(call, layout(task, seed))


def moved_click(reply: str, click: tuple[int, int]) -> str | None:
    """``reply`` (a computer-1 reply: a JSON object, then whatever closes the turn) with its click action
    moved to ``click``; None when its action is not a click."""
    start = reply.find("{")
    if start < 0:
        return None
    try:
        obj, end = json.JSONDecoder().raw_decode(reply, start)
    except ValueError:
        return None
    action = obj.get("action") if isinstance(obj, dict) else None
    if not isinstance(action, dict) or action.get("type") != "click":
        return None
    moved = obj | {"action": action | {"x": click[0], "y": click[1]}}
    return reply[:start] + json.dumps(moved) + reply[end:]


def drawn_call(base: CallRecord, seed: int, image: ImageRef, completion_ids: Sequence[int]) -> CallRecord:
    """The record of ``base``'s call replayed on layout ``seed``: its own episode (so it is a sample of
    its own), the new screenshot and reply; logprobs are not the policy's (SFT does not read them)."""
    episode = f"{base.episode_id}~drawn-{seed}"
    return msgspec.structs.replace(
        base,
        episode_id=episode,
        call_id=f"{episode}:0",
        images=(image,),
        completion_ids=TokenIds(completion_ids),
        completion_logprobs=Logprobs(0.0 for _ in completion_ids),
        weight_versions=(),
    )


def draw(bases: Sequence[Drawable], seeds: Sequence[int], blobs: BlobStore, tokenizer: Tokenizer) -> Drawn:
    """One sample per seed in ``seeds``, drawn from ``bases`` in turn (the screenshots from and to
    ``blobs``; the reply re-tokenized by ``tokenizer``, the policy's)."""
    import numpy as np
    from PIL import Image

    from cua_stream.binding.screenshots import encode

    usable: list[tuple[Drawable, np.ndarray, str, str]] = []
    for base in bases:
        ref = base.call.images[0]
        with Image.open(io.BytesIO(blobs.get(ref.sha256))) as image:
            fmt = image.format or "PNG"
            pixels = np.asarray(image.convert("RGB"))
        reply = tokenizer.decode(base.call.completion_ids, skip_special_tokens=False)
        if page_origin(pixels, base.seen) is not None and moved_click(reply, (0, 0)) is not None:
            usable.append((base, pixels, fmt, reply))
    samples: list[Sample] = []
    for i, seed in enumerate(seeds if usable else ()):
        base, pixels, fmt, reply = usable[i % len(usable)]
        new = redraw(pixels, base.seen, layout(base.seen.task, seed))
        assert new is not None  # the base's target was found above; the new layout does not move it
        text = moved_click(reply, new.click)
        assert text is not None
        data = encode(Image.fromarray(new.pixels), fmt)
        old = base.call.images[0]
        image = msgspec.structs.replace(old, sha256=blobs.put(data), size=len(data))
        call = drawn_call(base.call, seed, image, tokenizer.encode(text, add_special_tokens=False))
        samples.extend(assemble([call]).samples)
    return Drawn(tuple(samples), len(usable), len(bases) - len(usable))
