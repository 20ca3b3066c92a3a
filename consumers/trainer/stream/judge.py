"""A complete group judged: its samples and its decision (``samples`` + ``grpo``, pure), plus what needs
I/O around them: the screenshots the samples point at must be ones the step can take, as recorded, and a
group whose records break what training relies on (``checks``) is dropped (``invalid_records``, the
detail led by the check's name) with the records at fault, read back from the log as dead letters, never
a crash of the trainer (one such record had stopped it at every restart)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import anyio.to_thread

from consumers.trainer.episodes.checks import Check, Vocabulary, image_fault, pad_fault, sampled_fault
from consumers.trainer.episodes.sample_images import stored_image
from consumers.trainer.episodes.samples import CallTreeError, Sample, assemble, oldest_trained_version
from consumers.trainer.grpo.groups import (
    DropReason,
    EpisodeResult,
    GroupDecision,
    GroupPolicy,
    decide,
    drop,
    invalid_rewards,
)
from consumers.trainer.grpo.stale_mask import newest_trained_version
from consumers.trainer.stream.join import Coordinates, GroupState
from cua_stream.blobs import BlobStore
from cua_stream.bus.codec import dead_letter
from cua_stream.bus.consumer import handler_action
from cua_stream.bus.reader import read_record
from cua_stream.config import BusConfig
from cua_stream.errors import Action, BlobStoreUnavailable, CuaError, UntrainableRecord
from cua_stream.events import CallRecord, DeadLetter, Event, encode, headers_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fault:
    """A record a group was dropped for, and why."""

    at: Coordinates
    error: str


@dataclass(frozen=True)
class Judgement:
    decision: GroupDecision
    samples: dict[str, tuple[Sample, ...]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)


async def judge(
    group: GroupState,
    *,
    policy: GroupPolicy,
    version: int,
    max_seq_len: int,
    vocab: Vocabulary,
    blobs: BlobStore,
) -> Judgement:
    """The group's decision and samples, or its drop as ``invalid_records`` with the records at fault."""
    try:
        judgement, scored_calls = assess(
            group, policy=policy, version=version, max_seq_len=max_seq_len, vocab=vocab
        )
        if not judgement.faults:
            await check_images(scored_calls, blobs, vocab)
        return judgement
    except CallTreeError as e:
        where = {c: at for episode in group.episodes.values() for c, at in episode.where.items()}
        faults = [Fault(where[c], str(e)) for c in e.call_ids if c in where]
        return Judgement(drop(DropReason.INVALID_RECORDS, str(e)), faults=faults)
    except Exception as e:
        if handler_action(e) is not Action.DEAD_LETTER:
            raise  # the trainer's own failures (a blob store that is down) are not the group's
        log.exception("group %s cannot be trained; dropped", group.group_id)
        return Judgement(drop(DropReason.INVALID_RECORDS, f"{type(e).__name__}: {e}"))


def assess(
    group: GroupState, *, policy: GroupPolicy, version: int, max_seq_len: int, vocab: Vocabulary | None
) -> tuple[Judgement, list[CallRecord]]:
    """The pure part of ``judge``: the group's samples (each episode's scored attempt) and its decision,
    with the calls that were assembled (their screenshots are checked next); CallTreeError if the
    records break assembly or a check, a drop with the score records at fault if a reward does.
    ``cua-stream inspect`` rebuilds a trained step with it."""
    results: list[EpisodeResult] = []
    samples: dict[str, tuple[Sample, ...]] = {}
    scored_calls: list[CallRecord] = []
    for episode_id, episode in group.episodes.items():
        if episode.score is None:
            continue
        calls = [c for c in episode.calls if c.attempt == episode.score.attempt]  # the scored attempt's
        samples[episode_id] = assemble(calls, max_seq_len=max_seq_len, vocab=vocab).samples
        for call in calls:
            if found := sampled_fault(call):
                raise CallTreeError(f"call {call.call_id}: {found[1]}", [call.call_id], found[0])
        scored_calls += calls
        oldest = oldest_trained_version(samples[episode_id])
        newest = newest_trained_version(samples[episode_id])
        results.append(
            EpisodeResult(
                episode_id,
                episode.score.verdict,
                version if oldest is None else oldest,
                version if newest is None else newest,
            )
        )
    decision = decide(results, policy, trainer_version=version)
    assert decision is not None  # the group is complete
    if bad := invalid_rewards(results):
        faults = [Fault(at, decision.detail) for e in bad if (at := group.episodes[e].score_at)]
        return Judgement(decision, samples, faults), scored_calls
    if decision.train and not any(samples[e] for e in decision.advantages):
        decision = drop(DropReason.NO_SAMPLES)
    return Judgement(decision, samples), scored_calls


async def check_images(calls: list[CallRecord], blobs: BlobStore, vocab: Vocabulary) -> None:
    """CallTreeError naming the calls whose screenshot the step could not take or that record it wrong
    (``sample_images.stored_image``, ``checks.image_fault``), or whose image pads do not stand for the stored
    images (a grid the gateway did not record is checked here). Each screenshot read once, in one
    worker-thread trip for the whole group."""
    users: dict[str, list[str]] = {}
    for call in calls:
        for ref in call.images:
            if call.call_id not in (seen := users.setdefault(ref.sha256, [])):
                seen.append(call.call_id)
    try:
        stored = await anyio.to_thread.run_sync(lambda: {h: stored_image(h, blobs) for h in users})
    except CuaError:
        raise
    except Exception as e:  # not the image's: the store's (S3 down, a disk error), which a restart retries
        raise BlobStoreUnavailable(f"reading screenshots: {type(e).__name__}: {e}") from e
    for call in calls:
        for ref in call.images:
            if found := image_fault(ref, stored[ref.sha256], vocab.images):
                check, fault = found
                at_fault = users[ref.sha256] if check is Check.IMAGE else [call.call_id]
                raise CallTreeError(f"call {call.call_id}: {fault}", at_fault, check)
    for call in calls:
        if any(ref.grid_thw is None for ref in call.images):
            sizes = [stored[ref.sha256] for ref in call.images]
            grids = [vocab.images.grid_of(height, width) for width, height in sizes]  # type: ignore[misc]
            if fault := pad_fault(call, grids, vocab):
                raise CallTreeError(f"call {call.call_id}: {fault}", [call.call_id], Check.IMAGE_PADS)


async def dead_letter_for(bus: BusConfig, fault: Fault, group: GroupState) -> DeadLetter:
    """The DeadLetter of the record at ``fault``, read again from its topic (its bytes as they are on the
    log); if it is no longer there (retention), the decoded record encoded again."""
    topic, partition, offset = fault.at
    msg = await read_record(bus, topic, partition, offset)
    if msg is not None:
        key, value, headers = msg.key, msg.value, tuple(msg.headers)
    else:
        event = record_at(group, fault.at)
        key, value, headers = group.group_id.encode(), encode(event), tuple(headers_for(event))
    error = UntrainableRecord(f"group {group.group_id}: {fault.error}")
    return dead_letter(
        error, topic=topic, partition=partition, offset=offset, key=key, value=value, headers=headers
    )


def record_at(group: GroupState, at: Coordinates) -> Event:
    """The decoded record of ``group`` read at ``at`` (a call or a score)."""
    for episode in group.episodes.values():
        if episode.score is not None and episode.score_at == at:
            return episode.score
        for call in episode.calls:
            if episode.where.get(call.call_id) == at:
                return call
    raise KeyError(f"no record of group {group.group_id} at {at}")
