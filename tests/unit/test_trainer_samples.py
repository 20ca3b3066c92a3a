"""Sample assembly from recorded calls, on hand-built call trees: retries dropped, each completion owned
by exactly one sample, prompts masked, logprobs and versions aligned, summaries trained, cuts at call
boundaries."""

from __future__ import annotations

import pytest

from consumers.trainer.episodes.checks import Vocabulary
from consumers.trainer.episodes.samples import (
    NO_VERSION,
    CallTreeError,
    assemble,
    completion_versions,
    oldest_trained_version,
)
from cua_stream.events import (
    CallKind,
    CallRecord,
    ImageRef,
    Logprobs,
    SummaryEvent,
    TokenIds,
    TurnEvent,
    VersionSpan,
)
from cua_stream.image_grid import ImageGeometry

GEOMETRY = ImageGeometry(patch_size=14, merge_size=2, min_pixels=28 * 28, max_pixels=28 * 28 * 1280)
"""Qwen2-VL's patches, with a floor low enough for the small images of these tests."""


def call(
    seq: int,
    parent: int | None,
    prompt: list[int],
    completion: list[int],
    *,
    kind: CallKind = CallKind.AGENT_TURN,
    version: int = 0,
    spans: tuple[VersionSpan, ...] = (),
    images: tuple[ImageRef, ...] = (),
) -> CallRecord:
    cls = (
        SummaryEvent
        if kind in (CallKind.COMPACTION_SUMMARY, CallKind.COMPACTION_SHORT_SUMMARY)
        else TurnEvent
    )
    return cls(
        run_id="r",
        group_id="g",
        episode_id="e",
        seq=seq,
        call_id=f"c{seq}",
        parent_call_id=None if parent is None else f"c{parent}",
        kind=kind,
        prompt_ids=TokenIds(prompt),
        completion_ids=TokenIds(completion),
        completion_logprobs=Logprobs([-(seq + 1) / 10 - i / 100 for i in range(len(completion))]),
        images=images,
        weight_versions=spans,
        policy_version=version,
        finish_reason="stop",
        started_at=0.0,
    )


def test_a_linear_episode_is_one_sample_training_every_completion() -> None:
    calls = [call(0, None, [1, 2], [10, 11]), call(1, 0, [3], [12]), call(2, 1, [4, 5], [13, 14])]
    (sample,) = assemble(calls).samples
    assert list(sample.tokens) == [1, 2, 10, 11, 3, 12, 4, 5, 13, 14]
    assert list(sample.loss_mask) == [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]
    assert list(sample.rollout_logprobs) == pytest.approx([0, 0, -0.1, -0.11, 0, -0.2, 0, 0, -0.3, -0.31])
    assert sample.leaf_call_id == "c2" and not sample.truncated and sample.trained_tokens == 5


def test_an_abandoned_retry_is_dropped_and_its_sibling_trains() -> None:
    # c1 was retried as c2 (same parent, later seq); the episode went on from c2.
    calls = [call(0, None, [1], [10]), call(1, 0, [2], [11]), call(2, 0, [2], [12]), call(3, 2, [3], [13])]
    result = assemble(calls)
    assert result.dropped_retries == ("c1",)
    (sample,) = result.samples
    assert list(sample.tokens) == [1, 10, 2, 12, 3, 13] and 11 not in sample.tokens


def test_a_later_sibling_with_another_prompt_is_a_branch_not_a_retry() -> None:
    # computer-1's final-answer fallback re-sends the history rewritten ("(no text response)" for an
    # empty reply): after a one-call episode it is a second root; later, a branch off an earlier call.
    # The leaf before it was acted on, and trains.
    one_call = [call(0, None, [1, 2], [10]), call(1, None, [1, 2, 7, 8], [11], kind=CallKind.FINAL_ANSWER)]
    result = assemble(one_call)
    assert result.dropped_retries == () and [s.leaf_call_id for s in result.samples] == ["c0", "c1"]
    branched = [call(0, None, [1], [10]), call(1, 0, [2], [11]), call(2, 0, [2, 6], [12])]
    result = assemble(branched)
    assert result.dropped_retries == () and [s.leaf_call_id for s in result.samples] == ["c1", "c2"]
    # the same tokens over another screenshot are another request too (pads do not show the pixels)
    a, b = (ImageRef(sha256=h * 64, size=1, width=1, height=1) for h in "ab")
    shown = [call(0, None, [1], [10]), call(1, 0, [2], [11], images=(a,)), call(2, 0, [2], [12], images=(b,))]
    assert assemble(shown).dropped_retries == ()
    again = [call(0, None, [1], [10]), call(1, 0, [2], [11], images=(a,)), call(2, 0, [2], [12], images=(a,))]
    assert assemble(again).dropped_retries == ("c1",)


def test_compaction_gives_the_summary_a_sample_and_each_completion_one_owner() -> None:
    # c0 -> c1 -> c2 (summary of the history); then a new root c3 (the compacted history) -> c4.
    calls = [
        call(0, None, [1], [10]),
        call(1, 0, [2], [11]),
        call(2, 1, [9, 9], [20, 21], kind=CallKind.COMPACTION_SUMMARY),
        call(3, None, [1, 20, 21], [30]),
        call(4, 3, [5], [31]),
    ]
    summary, after = assemble(calls).samples
    assert summary.kind is CallKind.COMPACTION_SUMMARY and summary.leaf_call_id == "c2"
    assert list(summary.tokens) == [1, 10, 2, 11, 9, 9, 20, 21]
    assert list(summary.loss_mask) == [0, 1, 0, 1, 0, 0, 1, 1]  # its context's completions are its own
    assert list(after.tokens) == [1, 20, 21, 30, 5, 31]
    assert list(after.loss_mask) == [0, 0, 0, 1, 0, 1]  # the summary's text is a prompt here


def test_a_completion_shared_by_two_kept_leaves_is_trained_once() -> None:
    # Two branches from c1 that both went on (a history rewritten in place): c1 -> c2 -> c3, and
    # c1 -> c4 later. Neither leaf has a later sibling, so both train; c0 and c1 belong to both lineages.
    calls = [
        call(0, None, [1], [10]),
        call(1, 0, [2], [11]),
        call(2, 1, [3], [12]),
        call(3, 2, [4], [13]),  # branch A goes on
        call(4, 1, [5, 5], [14]),  # branch B from c1, later: c2 has a child, so it is not a retry leaf
    ]
    a, b = assemble(calls).samples
    assert (a.leaf_call_id, b.leaf_call_id) == ("c3", "c4")
    owned = {}
    for sample in (a, b):
        for token, mask in zip(sample.tokens, sample.loss_mask, strict=True):
            if token >= 10 and mask:
                owned.setdefault(token, []).append(sample.leaf_call_id)
    assert owned == {10: ["c3"], 11: ["c3"], 12: ["c3"], 13: ["c3"], 14: ["c4"]}
    assert list(b.loss_mask) == [0, 0, 0, 0, 0, 0, 1]  # c0/c1's completions are c3's to train


def test_versions_follow_the_spans_and_prompt_tokens_have_none() -> None:
    spans = (VersionSpan(version=3, start=0, end=2), VersionSpan(version=4, start=2, end=3))
    c = call(0, None, [1, 2], [10, 11, 12], spans=spans)
    assert completion_versions(c) == [3, 3, 4]
    (sample,) = assemble([c, call(1, 0, [5], [13], version=4)]).samples
    assert list(sample.token_versions) == [NO_VERSION, NO_VERSION, 3, 3, 4, NO_VERSION, 4]
    assert sample.oldest_version == 3


def test_the_off_policy_version_is_the_oldest_trained_token_across_a_weight_update() -> None:
    # c1 spans an update (v5 then v6, as in_place / retract record it); c0 was sampled by v2 but a
    # second branch from it trains c0's tokens in the first sample only.
    across = (VersionSpan(version=5, start=0, end=2), VersionSpan(version=6, start=2, end=4))
    calls = [
        call(0, None, [1], [10], version=2),
        call(1, 0, [2], [11, 12, 13, 14], spans=across),
        call(2, 0, [3, 3], [15], version=7),  # a later branch from c0: c1 has no child, both keep
    ]
    first, second = assemble(calls).samples
    assert (first.leaf_call_id, second.leaf_call_id) == ("c1", "c2")
    assert oldest_trained_version([first]) == 2  # c0's token is trained here
    assert oldest_trained_version([second]) == 7  # c0's v2 token is in its prompt, untrained
    (alone,) = assemble([call(0, None, [1], [11, 12, 13, 14], spans=across)]).samples
    assert oldest_trained_version([alone]) == 5  # the older part of a call across an update counts
    assert oldest_trained_version([alone, second]) == 5
    assert oldest_trained_version([]) is None


def test_images_come_in_prompt_order() -> None:
    img = [ImageRef(sha256=f"{i}" * 64, size=1, width=1, height=1) for i in range(3)]
    calls = [call(0, None, [1], [10], images=(img[0], img[1])), call(1, 0, [2], [11], images=(img[2],))]
    (sample,) = assemble(calls).samples
    assert sample.images == tuple(img)


def test_too_long_samples_are_cut_at_a_call_boundary_never_inside_a_completion() -> None:
    calls = [call(0, None, [1, 2], [10, 11]), call(1, 0, [3], [12, 13, 14])]
    (cut,) = assemble(calls, max_seq_len=6).samples  # the second call would end at 9
    assert list(cut.tokens) == [1, 2, 10, 11] and cut.truncated
    assert assemble(calls, max_seq_len=9).samples[0].truncated is False
    none = assemble(calls, max_seq_len=3)
    assert none.samples == () and none.too_long == ("c1",)


def test_records_arrive_in_any_order() -> None:
    calls = [call(0, None, [1], [10]), call(1, 0, [2], [11]), call(2, 1, [3], [12])]
    assert assemble(calls[::-1]).samples == assemble(calls).samples


def test_a_broken_tree_is_an_error() -> None:
    with pytest.raises(CallTreeError, match="not recorded"):
        assemble([call(1, 0, [2], [11])])
    with pytest.raises(CallTreeError, match="twice"):
        assemble([call(0, None, [1], [10]), call(0, None, [1], [10])])
    assert assemble([]).samples == ()


def test_a_parent_cycle_is_an_error_not_an_endless_walk() -> None:
    # Before: _lineage walked c1 -> c2 -> c1 ... until memory ran out (7.5 s to a MemoryError at 1 GiB).
    calls = [call(0, None, [1], [10]), call(1, 2, [2], [11]), call(2, 1, [3], [12]), call(3, 1, [4], [13])]
    with pytest.raises(CallTreeError, match="form a cycle") as caught:
        assemble(calls)
    assert set(caught.value.call_ids) == {"c1", "c2"}
    with pytest.raises(CallTreeError, match="form a cycle"):
        assemble([call(0, 0, [1], [10])])  # its own parent


@pytest.mark.parametrize(
    ("spans", "n"),
    [
        ((VersionSpan(version=1, start=-1, end=3),), 3),  # the span that crashed the trainer
        ((VersionSpan(version=1, start=0, end=2),), 3),  # short
        ((VersionSpan(version=1, start=0, end=4),), 3),  # past the end
        ((VersionSpan(version=1, start=0, end=1), VersionSpan(version=2, start=2, end=3)), 3),  # a gap
        ((VersionSpan(version=1, start=0, end=2), VersionSpan(version=2, start=1, end=3)), 3),  # overlap
        ((VersionSpan(version=1, start=0, end=3), VersionSpan(version=2, start=3, end=3)), 3),  # empty
    ],
)
def test_version_spans_must_cover_the_completion_exactly(spans: tuple[VersionSpan, ...], n: int) -> None:
    bad = call(0, None, [1], list(range(10, 10 + n)), spans=spans)
    with pytest.raises(CallTreeError, match="do not cover its 3 completion tokens") as caught:
        assemble([bad])
    assert caught.value.call_ids == ("c0",)


def test_spans_that_tile_and_no_spans_are_both_accepted() -> None:
    tiled = (VersionSpan(version=1, start=0, end=1), VersionSpan(version=2, start=1, end=3))
    assert assemble([call(0, None, [1], [10, 11, 12], spans=tiled)]).samples
    assert assemble([call(0, None, [1], [10, 11, 12])]).samples
    empty = call(0, None, [1], [], spans=(VersionSpan(version=1, start=0, end=0),))
    assert assemble([empty]).samples == ()  # nothing to train, but nothing wrong


def test_inconsistent_calls_are_errors_naming_the_call() -> None:
    import msgspec

    good = call(0, None, [1, 2], [10, 11])
    cases = {
        "2 logprobs for 3 completion ids": msgspec.structs.replace(good, completion_ids=TokenIds([10, 11, 12])),
        "not a finite number": msgspec.structs.replace(good, completion_logprobs=Logprobs([-0.1, float("nan")])),
        "a negative token id": msgspec.structs.replace(good, prompt_ids=TokenIds([1, -1])),
    }  # fmt: skip
    for message, bad in cases.items():
        with pytest.raises(CallTreeError, match=message) as caught:
            assemble([bad])
        assert caught.value.call_ids == ("c0",)


def test_with_a_vocabulary_ids_and_image_pads_must_fit_the_model() -> None:
    vocab = Vocabulary(size=100, image_token_id=99, images=GEOMETRY)
    img = ImageRef(sha256="a" * 64, size=1, width=56, height=28, grid_thw=(1, 2, 4))  # 8 patches: 2 pads
    ok = call(0, None, [1, 99, 99, 2], [10], images=(img,))
    assert assemble([ok], vocab=vocab).samples
    with pytest.raises(CallTreeError, match="1 image pads for 1 image"):
        assemble([call(0, None, [1, 99, 2], [10], images=(img,))], vocab=vocab)
    with pytest.raises(CallTreeError, match="image pad among the completion"):
        assemble([call(0, None, [1], [10, 99])], vocab=vocab)
    with pytest.raises(CallTreeError, match="token id 100 is outside the vocabulary of 100"):
        assemble([call(0, None, [1], [100])], vocab=vocab)
    assert assemble([call(0, None, [1], [100])]).samples  # without a vocabulary: not checked
