"""What a record must be for the trainer to take it: small pure checks, each under its name (``Check``).

A complete group is judged (``judge``) before it is queued for a step: each episode's scored calls go
through ``call_fault`` (from ``samples.assemble``) and ``sampled_fault``, their screenshots through
``image_fault`` and ``pad_fault`` (against the stored images, read by ``images.stored_image``), the
rewards through ``groups.invalid_rewards``. A record that breaks one drops its group as
``invalid_records``, the detail led by the check's name, and is dead-lettered. A check left to the step
fails the step instead: the trainer exits, and the restarted one fails on the same group again.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cua_stream.events import CallRecord, ImageRef, VersionSpan
from cua_stream.image_grid import Grid, ImageGeometry
from cua_stream.versions import MAX_VERSION, is_version


class Check(enum.StrEnum):
    """The checks a group's records go through, by name (a dropped group's detail starts with one)."""

    CALL_TREE = "call_tree"
    """The calls form a tree: no unknown parent, no call twice, no cycle, all of one episode."""
    LOGPROBS = "logprobs"
    """One logprob per completion token, each a finite log-probability (<= 0); a sampled token's not
    below ``LOWEST_LOGPROB``."""
    TOKEN_IDS = "token_ids"
    """No negative token id; with the model, each in its vocabulary."""
    VERSIONS = "versions"
    """Version spans that tile the completion; every version one a trainer can have published."""
    PROMPT = "prompt"
    """A root call's prompt is not empty."""
    IMAGE_PADS = "image_pads"
    """Image pads only in the prompt, each image's as one run of the count its grid makes."""
    IMAGE = "image"
    """The stored screenshot is in the blob store, matches its hash, decodes, stays within the pixel
    limit, and has a size the image processor takes."""
    IMAGE_GRID = "image_grid"
    """The recorded grid and size are the stored screenshot's."""
    REWARD = "reward"
    """A finite number within ``groups.MAX_REWARD``."""


Finding = tuple[Check, str]
"""A check a record broke, and how."""

LOWEST_LOGPROB = -104.0
"""Below ln(2^-149) = -103.3, the smallest probability a float32 holds: a token that improbable rounds
to probability 0 in any float32 sampler, so none drew it. Only sampled tokens are held to it (a forced
demonstration token may be that improbable); one far below it made the step's loss infinite and every
weight NaN."""


@dataclass(frozen=True)
class Vocabulary:
    """What a sample must agree with in the model that trains it."""

    size: int
    image_token_id: int
    images: ImageGeometry
    """How the model's image processor cuts an image into patches (its grid, so its pads)."""


def call_fault(call: CallRecord, vocab: Vocabulary | None = None) -> Finding | None:
    """The first check ``call`` breaks in itself (None: none). With ``vocab``, also what the model
    needs: ids in its vocabulary, and image pads that stand for the images their recorded grids make
    (the judge checks a call with an unrecorded grid against the stored image instead)."""
    return (
        _named(Check.LOGPROBS, logprob_fault(call))
        or _named(Check.TOKEN_IDS, token_id_fault(call, vocab))
        or _named(Check.VERSIONS, version_fault(call))
        or _named(Check.PROMPT, prompt_fault(call))
        or _named(Check.IMAGE_PADS, _recorded_pad_fault(call, vocab) if vocab is not None else None)
    )


def sampled_fault(call: CallRecord) -> Finding | None:
    """What a call GRPO trains must hold beyond ``call_fault``: its completion was sampled."""
    lowest = min(call.completion_logprobs, default=0.0)
    if lowest < LOWEST_LOGPROB:
        return (
            Check.LOGPROBS,
            f"logprob {lowest:g} is below {LOWEST_LOGPROB:g}: no float32 sampler draws that",
        )
    return None


def logprob_fault(call: CallRecord) -> str | None:
    n = len(call.completion_ids)
    if len(call.completion_logprobs) != n:
        return f"{len(call.completion_logprobs)} logprobs for {n} completion ids"
    if not all(map(math.isfinite, call.completion_logprobs)):
        return "a logprob is not a finite number"
    if (highest := max(call.completion_logprobs, default=0.0)) > 0:
        return f"logprob {highest:g} is above 0 (a probability over 1)"
    return None


def token_id_fault(call: CallRecord, vocab: Vocabulary | None = None) -> str | None:
    if min(call.prompt_ids, default=0) < 0 or min(call.completion_ids, default=0) < 0:
        return "a negative token id"
    top = max(max(call.prompt_ids, default=0), max(call.completion_ids, default=0))
    if vocab is not None and top >= vocab.size:
        return f"token id {top} is outside the vocabulary of {vocab.size}"
    return None


def version_fault(call: CallRecord) -> str | None:
    """Spans that tile the completion exactly (or none: one version for the call; a span from -1 had
    crashed the trainer at every restart), and versions a trainer can have published (one of 2^40 had
    overflowed the step's int32 token versions)."""
    n = len(call.completion_ids)
    if call.weight_versions and not _tiles(call.weight_versions, n):
        spans = ", ".join(f"[{s.start}, {s.end})" for s in call.weight_versions[:8])
        return f"version spans {spans} do not cover its {n} completion tokens exactly"
    for version in (call.policy_version, *(s.version for s in call.weight_versions)):
        if not is_version(version):
            return f"version {version} is outside 0..{MAX_VERSION}"
    return None


def prompt_fault(call: CallRecord) -> str | None:
    """A root's first completion token would sit at a sample's position 0, which nothing predicts: the
    step would train it with a logprob of 0 (the gateway's roots always hold the rendered chat)."""
    if call.parent_call_id is None and not call.prompt_ids and call.completion_ids:
        return "a root call with an empty prompt: nothing predicts its first completion token"
    return None


def pad_fault(call: CallRecord, grids: Sequence[Grid], vocab: Vocabulary) -> str | None:
    """Whether ``call``'s image pads stand for its images of ``grids``: none in the completion, and in
    the prompt each image's as one run of the count its grid makes, in order, away from the prompt's
    edges (the model gives a run of pads to the next image: a run split, merged, or joined to a
    neighbouring call's pairs pixels with the wrong positions, or fails the step)."""
    pad = vocab.image_token_id
    if pad in call.completion_ids:
        return "an image pad among the completion tokens"
    prompt = call.prompt_ids
    counts = [vocab.images.tokens(g) for g in grids]
    have, want = prompt.count(pad), sum(counts)
    if have != want:
        return f"{have} image pads for {len(grids)} image(s) whose grids make {want}"
    end = 0
    for i, n in enumerate(counts, 1):
        if n <= 0:
            return f"image {i}'s grid {list(grids[i - 1])} makes no image token"
        start = prompt.index(pad, end)
        end = start + n
        if prompt[start:end].count(pad) != n or (end < len(prompt) and prompt[end] == pad):
            return f"image {i} of {len(grids)}: its {n} pads are not one run"
        if start == 0 or end == len(prompt):
            return f"image {i}'s pads at the edge of the prompt"
    return None


def image_fault(ref: ImageRef, stored: tuple[int, int] | str, geometry: ImageGeometry) -> Finding | None:
    """Whether the screenshot ``ref`` names is one the step can take, as recorded. ``stored``: its
    (width, height) as stored, or why it cannot be read (``images.stored_image``)."""
    name = f"image {ref.sha256}"
    if isinstance(stored, str):
        return Check.IMAGE, f"{name} {stored}"
    width, height = stored
    try:
        grid = geometry.grid_of(height, width)
    except ValueError as e:  # an aspect ratio over 200
        return Check.IMAGE, f"{name} is {width}x{height}, which the image processor refuses: {e}"
    if ref.grid_thw is not None and tuple(ref.grid_thw) != grid:
        return (
            Check.IMAGE_GRID,
            f"{name} is {width}x{height}, grid {list(grid)}; recorded {list(ref.grid_thw)}",
        )
    if (ref.width, ref.height) != (width, height):
        return Check.IMAGE_GRID, f"{name} is {width}x{height}; recorded {ref.width}x{ref.height}"
    return None


def _recorded_pad_fault(call: CallRecord, vocab: Vocabulary) -> str | None:
    grids = [ref.grid_thw for ref in call.images]
    if any(g is None for g in grids):  # checked against the stored images when the group is judged
        return (
            "an image pad among the completion tokens"
            if vocab.image_token_id in call.completion_ids
            else None
        )
    return pad_fault(call, grids, vocab)  # type: ignore[arg-type]


def _named(check: Check, fault: str | None) -> Finding | None:
    return (check, fault) if fault else None


def _tiles(spans: Sequence[VersionSpan], n: int) -> bool:
    """``spans`` cover [0, n) in order, each non-empty (a lone [0, 0) for an empty completion)."""
    if n == 0:
        return all(s.start == s.end == 0 for s in spans)
    at = 0
    for span in spans:
        if span.start != at or span.end <= span.start:
            return False
        at = span.end
    return at == n
