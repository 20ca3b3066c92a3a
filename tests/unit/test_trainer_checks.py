"""The checks a group's records go through when it is judged, each under its name: what a step could not
take (or would train wrong) is found here, before the group is queued. Pure checks on hand-built calls;
the screenshots read from a real blob store directory."""

from __future__ import annotations

import io
from pathlib import Path

import msgspec
import pytest
from PIL import Image

from consumers.trainer.episodes.checks import (
    LOWEST_LOGPROB,
    Check,
    Vocabulary,
    call_fault,
    image_fault,
    pad_fault,
    sampled_fault,
)
from consumers.trainer.episodes.sample_images import stored_image
from consumers.trainer.episodes.samples import CallTreeError, assemble
from consumers.trainer.grpo.groups import GroupPolicy
from consumers.trainer.stream.join import EpisodeState, GroupState
from consumers.trainer.stream.judge import judge
from cua_stream.blobs import LocalBlobStore
from cua_stream.errors import BlobStoreUnavailable
from cua_stream.events import CallRecord, ImageRef, Logprobs, Reward, ScoreEvent, VersionSpan
from cua_stream.versions import MAX_VERSION
from tests.unit.test_trainer_samples import GEOMETRY, call

PAD, START, END = 99, 97, 98
VOCAB = Vocabulary(size=100, image_token_id=PAD, images=GEOMETRY)
IMG = ImageRef(sha256="a" * 64, size=1, width=56, height=28, grid_thw=(1, 2, 4))  # 8 patches: 2 pads


def found(record: CallRecord, vocab: Vocabulary | None = VOCAB) -> tuple[Check, str] | None:
    return call_fault(record, vocab)


def png(width: int, height: int, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 90)).save(out, fmt)
    return out.getvalue()


# -- a call in itself -------------------------------------------------------------------------------------


def test_a_logprob_above_0_is_not_a_log_probability() -> None:
    bad = msgspec.structs.replace(call(0, None, [1], [10, 11]), completion_logprobs=Logprobs([-0.5, 5.0]))
    assert found(bad) == (Check.LOGPROBS, "logprob 5 is above 0 (a probability over 1)")
    assert found(msgspec.structs.replace(bad, completion_logprobs=Logprobs([-0.5, 0.0]))) is None


def test_a_sampled_token_below_float32s_smallest_probability_was_never_drawn() -> None:
    # -1000 made the step's loss infinite and every weight NaN, the step "succeeding"
    for lowest in (-1000.0, -1e39, LOWEST_LOGPROB - 0.5):
        bad = msgspec.structs.replace(
            call(0, None, [1], [10, 11]), completion_logprobs=Logprobs([-1.0, lowest])
        )
        assert found(bad) is None  # in itself a log-probability (a forced demonstration token may be one)
        assert sampled_fault(bad) == (
            Check.LOGPROBS,
            f"logprob {lowest:g} is below -104: no float32 sampler draws that",
        )
    fine = msgspec.structs.replace(call(0, None, [1], [10]), completion_logprobs=Logprobs([-103.0]))
    assert sampled_fault(fine) is None


@pytest.mark.parametrize(
    ("field", "version"),
    [("policy_version", 2**40), ("policy_version", -1), ("span", 2**40), ("span", -3)],
)
def test_a_version_no_trainer_published_is_found(field: str, version: int) -> None:
    # 2**40 overflowed the step's int32 token versions: a bare OverflowError and no dead letter
    good = call(0, None, [1], [10, 11], spans=(VersionSpan(version=2, start=0, end=2),), version=2)
    bad = (
        msgspec.structs.replace(good, policy_version=version)
        if field == "policy_version"
        else msgspec.structs.replace(good, weight_versions=(VersionSpan(version=version, start=0, end=2),))
    )
    assert found(good) is None
    assert found(bad) == (Check.VERSIONS, f"version {version} is outside 0..2147483647")
    assert found(msgspec.structs.replace(good, policy_version=MAX_VERSION)) is None
    with pytest.raises(CallTreeError, match=f"^versions: call c0: version {version} is outside") as caught:
        assemble([bad])  # without a vocabulary too: SFT's assembly would overflow as well
    assert caught.value.check is Check.VERSIONS and caught.value.call_ids == ("c0",)


def test_a_root_with_an_empty_prompt_has_a_first_token_nothing_predicts() -> None:
    # the step trained it at position 0 with a logprob of 0: a loss of 527 instead of 0.3 in one step
    assert found(call(0, None, [], [10, 11])) == (
        Check.PROMPT,
        "a root call with an empty prompt: nothing predicts its first completion token",
    )
    assert found(call(1, 0, [], [12])) is None  # a child's prompt may be empty: its parent's tokens lead
    assert found(call(0, None, [], [])) is None  # nothing to train, nothing wrong


# -- image pads ------------------------------------------------------------------------------------------


def prompt_with(*runs: int) -> list[int]:
    """A prompt with one vision block per run of pads (as the template writes them)."""
    out = [1]
    for n in runs:
        out += [START, *[PAD] * n, END, 2]
    return out


@pytest.mark.parametrize(
    ("prompt", "images", "fault"),
    [
        (prompt_with(2), (IMG,), None),
        (prompt_with(2, 2), (IMG, IMG), None),
        ([1, 2], (IMG,), "0 image pads for 1 image(s) whose grids make 2"),  # F1: no pads at all
        (prompt_with(1), (IMG,), "1 image pads for 1 image(s) whose grids make 2"),
        (prompt_with(2), (), "2 image pads for 0 image(s) whose grids make 0"),
        (prompt_with(1, 3), (IMG, IMG), "image 1 of 2: its 2 pads are not one run"),  # split otherwise
        (prompt_with(3, 1), (IMG, IMG), "image 1 of 2: its 2 pads are not one run"),
        (prompt_with(4), (IMG, IMG), "image 1 of 2: its 2 pads are not one run"),  # two images merged
        ([PAD, PAD, END, 2], (IMG,), "image 1's pads at the edge of the prompt"),
        ([1, START, PAD, PAD], (IMG,), "image 1's pads at the edge of the prompt"),
    ],
)
def test_image_pads_stand_for_their_images_one_run_each(
    prompt: list[int], images: tuple[ImageRef, ...], fault: str | None
) -> None:
    record = call(0, None, prompt, [10], images=images)
    assert pad_fault(record, [ref.grid_thw for ref in images], VOCAB) == fault  # type: ignore[misc]
    assert found(record) == (None if fault is None else (Check.IMAGE_PADS, fault))


def test_a_grid_that_makes_no_token_and_a_pad_in_the_completion_are_found() -> None:
    nothing = msgspec.structs.replace(IMG, grid_thw=(1, 1, 1))
    assert found(call(0, None, [1, 2], [10], images=(nothing,))) == (
        Check.IMAGE_PADS,
        "image 1's grid [1, 1, 1] makes no image token",
    )
    assert found(call(0, None, [1], [10, PAD])) == (
        Check.IMAGE_PADS,
        "an image pad among the completion tokens",
    )


def test_a_call_whose_grid_is_not_recorded_waits_for_the_stored_image() -> None:
    unrecorded = msgspec.structs.replace(IMG, grid_thw=None)
    assert found(call(0, None, [1, 2], [10], images=(unrecorded,))) is None  # judged against the blob
    assert found(call(0, None, [1, 2], [10, PAD], images=(unrecorded,))) is not None


# -- the stored screenshot -------------------------------------------------------------------------------


def test_a_stored_image_is_held_to_its_record() -> None:
    ok = ImageRef(sha256="b" * 64, size=1, width=56, height=28, grid_thw=(1, 2, 4))
    assert image_fault(ok, (56, 28), GEOMETRY) is None
    assert image_fault(msgspec.structs.replace(ok, grid_thw=None), (56, 28), GEOMETRY) is None
    # F1: the recorded grid differs from the stored image's (the step failed with "image grids differ")
    assert image_fault(ok, (112, 56), GEOMETRY) == (
        Check.IMAGE_GRID,
        f"image {'b' * 64} is 112x56, grid [1, 4, 8]; recorded [1, 2, 4]",
    )
    assert image_fault(msgspec.structs.replace(ok, width=57), (56, 28), GEOMETRY) == (
        Check.IMAGE_GRID,
        f"image {'b' * 64} is 56x28; recorded 57x28",
    )
    check, fault = image_fault(ok, (8400, 28), GEOMETRY) or (None, "")
    assert check is Check.IMAGE and "is 8400x28, which the image processor refuses" in fault
    assert image_fault(ok, "is not in the blob store", GEOMETRY) == (
        Check.IMAGE,
        f"image {'b' * 64} is not in the blob store",
    )


def test_a_stored_image_the_step_could_not_take_says_why(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    whole = png(56, 28)
    assert stored_image(blobs.put(whole), blobs) == (56, 28)
    assert stored_image(blobs.put(png(40, 30, "WEBP")), blobs) == (40, 30)
    assert stored_image(blobs.put(png(40, 30, "JPEG")), blobs) == (40, 30)
    assert stored_image("c" * 64, blobs) == "is not in the blob store"
    assert str(stored_image(blobs.put(b"not an image"), blobs)).startswith("does not decode (Unidentified")
    for cut in (whole[:-30], png(40, 30, "JPEG")[:-60], png(40, 30, "WEBP")[:-20]):  # truncated
        assert str(stored_image(blobs.put(cut), blobs)).startswith("does not decode ("), cut[:4]
    changed = blobs.put(png(20, 20))
    blobs.path_of(changed).write_bytes(whole)  # the file no longer holds the bytes its name hashes
    assert stored_image(changed, blobs) == "in the blob store does not match its hash"
    huge = io.BytesIO()
    Image.new("1", (6000, 6000)).save(huge, "PNG")  # 36 Mpx in a few KB
    assert (
        stored_image(blobs.put(huge.getvalue()), blobs) == "is 6000x6000: over the limit of 33,554,432 pixels"
    )


# -- judged ---------------------------------------------------------------------------------------------


def group_of(*calls: CallRecord) -> GroupState:
    group = GroupState("g", 0, 0.0)
    episode = group.episodes["e"] = EpisodeState()
    for offset, record in enumerate(calls):
        episode.calls.append(record)
        episode.where[record.call_id] = ("turns", 0, offset)
    episode.score = ScoreEvent(
        run_id="r", group_id="g", episode_id="e", verdict=Reward(value=1.0), policy_version=0, scored_at=0
    )
    episode.score_at = ("scores", 0, 0)
    return group


async def judged(blobs: LocalBlobStore, *calls: CallRecord) -> tuple[str, list[int]]:
    """The drop's detail ("" if the group trains) and the offsets of the records at fault."""
    out = await judge(
        group_of(*calls),
        policy=GroupPolicy(group_size=1),
        version=0,
        max_seq_len=1000,
        vocab=VOCAB,
        blobs=blobs,
    )
    return out.decision.detail, [at[2] for at in (f.at for f in out.faults)]


@pytest.mark.anyio
async def test_a_group_is_judged_against_its_stored_screenshots(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    stored = ImageRef(sha256=blobs.put(png(56, 28)), size=1, width=56, height=28, grid_thw=(1, 2, 4))
    unrecorded = msgspec.structs.replace(stored, grid_thw=None)
    ok = call(0, None, prompt_with(2), [10], images=(stored,))
    assert await judged(blobs, ok) == ("", [])
    assert await judged(blobs, call(0, None, prompt_with(2), [10], images=(unrecorded,))) == ("", [])
    # F1: no recorded grid and no pads: the step failed with "Image features and image tokens do not match"
    no_pads = call(0, None, [1, 2], [10], images=(unrecorded,))
    assert await judged(blobs, no_pads) == (
        "image_pads: call c0: 0 image pads for 1 image(s) whose grids make 2",
        [0],
    )
    # F1: a grid recorded smaller than the stored image's, its pads as recorded
    small = msgspec.structs.replace(stored, grid_thw=(1, 2, 2))
    detail, at = await judged(blobs, ok, call(1, 0, prompt_with(1), [11], images=(small,)))
    assert (
        detail == f"image_grid: call c1: image {stored.sha256} is 56x28, grid [1, 2, 4]; recorded [1, 2, 2]"
    )
    assert at == [1]
    # a screenshot every call of the group shows, truncated in the store: each call showing it is at fault
    cut = msgspec.structs.replace(stored, sha256=blobs.put(png(56, 28)[:-30]))
    detail, at = await judged(
        blobs,
        call(0, None, prompt_with(2), [10], images=(cut,)),
        call(1, 0, prompt_with(2), [11], images=(cut,)),
    )
    assert detail.startswith(f"image: call c0: image {cut.sha256} does not decode (") and at == [0, 1]


@pytest.mark.anyio
async def test_a_blob_store_that_fails_is_the_trainers_failure_not_the_groups(tmp_path: Path) -> None:
    class Unreachable(LocalBlobStore):
        def get(self, sha256: str) -> bytes:
            raise ConnectionError("the object store does not answer")

    blobs = Unreachable(tmp_path)
    ref = ImageRef(sha256="d" * 64, size=1, width=56, height=28, grid_thw=(1, 2, 4))
    with pytest.raises(BlobStoreUnavailable, match="does not answer"):  # a crash: the restart retries it
        await judged(blobs, call(0, None, prompt_with(2), [10], images=(ref,)))
