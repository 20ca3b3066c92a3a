"""One episode's call tree as the trainer sees it, for ``cua-stream inspect episode``. Pure: the caller
reads the topics and hands the records in.

Each attempt of the episode (a work request run again after a crash gets a new one) is its own tree of
calls: turns and compaction summaries, each extending its parent, a retry being a later sibling sent with
the same prompt. The attempt's samples come from ``samples.assemble``, the trainer's own assembly, and
each call's completion is shown with the sample that trains it, read back from that sample's loss mask
(so a cut at ``max_seq_len`` shows as a completion no sample trains).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumers.trainer.episodes.samples import CallTreeError, Sample, assemble
from cua_stream.events import CallRecord, GroupDropped, ScoreEvent, TrainStep


@dataclass(frozen=True)
class CallNode:
    call: CallRecord
    depth: int
    retry_of: str | None
    """The earlier sibling this call sent again (same parent, same prompt and screenshots)."""
    abandoned: bool
    """A leaf that was retried: the episode went on from the retry, so it is not trained."""
    owner: str | None
    """The leaf call id of the sample that trains this call's completion; None: no sample does."""


@dataclass(frozen=True)
class AttemptTree:
    attempt: int
    calls: tuple[CallNode, ...]
    """Depth first, each call's children in ``seq`` order."""
    samples: tuple[Sample, ...]
    too_long: tuple[str, ...] = ()
    error: str = ""
    """Why the calls do not assemble (the trainer dropped their group as ``invalid_records``)."""


@dataclass(frozen=True)
class EpisodeView:
    episode_id: str
    group_id: str
    attempts: tuple[AttemptTree, ...]
    score: ScoreEvent | None
    trained_in: TrainStep | None
    dropped: GroupDropped | None

    @property
    def scored_attempt(self) -> AttemptTree | None:
        return next((a for a in self.attempts if self.score and a.attempt == self.score.attempt), None)


def episode_view(
    run_id: str,
    episode_id: str,
    records: Iterable[CallRecord | ScoreEvent],
    steps: Iterable[TrainStep] = (),
    drops: Iterable[GroupDropped] = (),
    *,
    max_seq_len: int | None = None,
) -> EpisodeView | None:
    """The episode's tree from the run's calls and scores (any others are ignored), with the run's step
    that trained it or its group's drop; None if no record of the episode is given."""
    calls: dict[str, CallRecord] = {}
    score: ScoreEvent | None = None
    for record in records:
        if record.episode_id != episode_id or record.run_id != run_id:
            continue
        if isinstance(record, ScoreEvent):
            score = score or record  # the trainer keeps the first score of an episode
        else:
            calls.setdefault(record.call_id, record)  # at-least-once delivery: the first copy
    if not calls and score is None:
        return None
    group_id = score.group_id if score else next(iter(calls.values())).group_id
    by_attempt: dict[int, list[CallRecord]] = {}
    for call in calls.values():
        by_attempt.setdefault(call.attempt, []).append(call)
    attempts = tuple(_attempt(n, c, max_seq_len) for n, c in sorted(by_attempt.items()))
    trained = [s for s in steps if episode_id in s.attempts or (not s.attempts and group_id in s.group_ids)]
    dropped = [d for d in drops if d.group_id == group_id]
    return EpisodeView(
        episode_id,
        group_id,
        attempts,
        score,
        trained[0] if trained else None,
        dropped[0] if dropped else None,
    )


def _attempt(attempt: int, calls: list[CallRecord], max_seq_len: int | None) -> AttemptTree:
    calls = sorted(calls, key=lambda c: c.seq)
    try:
        assembly = assemble(calls, max_seq_len=max_seq_len)
    except CallTreeError as e:
        nodes = tuple(CallNode(c, 0, None, False, None) for c in calls)
        return AttemptTree(attempt, nodes, (), error=str(e))
    by_id = {c.call_id: c for c in calls}
    owner = _owners(assembly.samples, by_id)
    children: dict[str | None, list[CallRecord]] = {}
    for call in calls:
        children.setdefault(call.parent_call_id, []).append(call)
    nodes: list[CallNode] = []

    def visit(call: CallRecord, depth: int) -> None:
        siblings = children[call.parent_call_id]
        earlier = [s for s in siblings if s.seq < call.seq and _same_request(s, call)]
        retry_of = earlier[-1].call_id if earlier else None
        abandoned = call.call_id in assembly.dropped_retries
        nodes.append(CallNode(call, depth, retry_of, abandoned, owner.get(call.call_id)))
        for child in children.get(call.call_id, []):
            visit(child, depth + 1)

    for root in children.get(None, []):
        visit(root, 0)
    return AttemptTree(attempt, tuple(nodes), assembly.samples, assembly.too_long)


def _same_request(a: CallRecord, b: CallRecord) -> bool:
    return a.prompt_ids == b.prompt_ids and [i.sha256 for i in a.images] == [i.sha256 for i in b.images]


def _owners(samples: Iterable[Sample], by_id: dict[str, CallRecord]) -> dict[str, str]:
    """Call id → the leaf of the sample whose loss mask trains that call's completion."""
    out: dict[str, str] = {}
    for sample in samples:
        lineage = [by_id[sample.leaf_call_id]]
        while (parent := lineage[-1].parent_call_id) is not None:
            lineage.append(by_id[parent])
        at = 0
        for call in reversed(lineage):  # root first, as the sample's tokens are laid out
            at += len(call.prompt_ids)
            end = at + len(call.completion_ids)
            if end > len(sample.tokens):
                break  # cut at max_seq_len
            if end > at and sample.loss_mask[at]:
                out.setdefault(call.call_id, sample.leaf_call_id)
            at = end
    return out
