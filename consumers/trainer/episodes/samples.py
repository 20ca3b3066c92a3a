"""An episode's recorded calls → training samples. Pure: no I/O, no Kafka, no torch.

The gateway recorded every completion of the episode as a call: its prompt ids after its parent's
prompt + completion (all of them for a root), its completion ids, their logprobs and weight versions,
and the images of its new prompt part. The calls form a tree (``parent_call_id``): each request extends
the call whose messages it continues; a retry is a second child of the same parent; a compaction starts
a new root, and the compactor's summary call is a leaf of the tree it summarised.

Assembly, in order (the reference semantics, with the choices said where we make one):

1. **Drop abandoned retries**: a leaf whose request was sent again — a later sibling (by ``seq``) under
   the same parent with the same prompt, tokens and images — was retried, and the episode went on from
   the retry; it is not trained. A later sibling with another prompt is a new branch, not a retry: the
   leaf's completion was acted on. computer-1 makes those: its final-answer fallback re-sends the history
   rewritten (empty replies become "(no text response)"), so it branches off an earlier call or starts
   a new root — after a one-call episode, a root beside a one-call root.
2. **One sample per kept leaf**: its tokens are the lineage root → leaf, each call's prompt delta then
   its completion.
3. **Ownership**: a completion shared by several kept leaves (their common ancestors) is trained in
   exactly one of them, the leaf committed first (smallest ``seq``); the others mask it. So every sampled
   token contributes to the loss once. Prompt tokens (observations, template glue) are always masked.
4. **Alignment**: per token, the rollout logprob (0.0 where masked) and the weight version that sampled
   it (``NO_VERSION`` for prompt tokens); the images in prompt order.
5. **Length**: a sample longer than ``max_seq_len`` is cut at a call boundary, after the last completion
   that fits, never inside one; a sample whose first completion does not fit is dropped with a reason.

A compaction summary is a leaf like any other: a sample of its own, the policy's completion on the
context it saw. Every sample of an episode shares the episode's reward (applied by ``grpo``).
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from consumers.trainer.episodes.checks import Check, Vocabulary, call_fault
from cua_stream.events import CallKind, CallRecord, ImageRef, Logprobs, TokenIds

NO_VERSION = -1
"""Weight version of a token the policy did not sample (prompt, observation, template glue)."""


class CallTreeError(ValueError):
    """The records break what assembly (or the step) relies on: they do not form a call tree (a parent
    is missing, a call repeats, parents form a cycle), or a call breaks one of the ``checks`` (lengths
    disagree, version spans do not cover its completion, a token id or logprob that cannot be, a
    screenshot the step cannot take). ``call_ids``: the calls at fault (their records are
    dead-lettered); ``check``: the check they broke (the message starts with its name)."""

    def __init__(self, message: str, call_ids: Sequence[str] = (), check: Check = Check.CALL_TREE) -> None:
        super().__init__(f"{check}: {message}")
        self.call_ids = tuple(call_ids)
        self.check = check


@dataclass(frozen=True)
class Sample:
    """One training sequence of an episode: a kept leaf's lineage, masked so each completion counts once."""

    run_id: str
    group_id: str
    episode_id: str
    leaf_call_id: str
    kind: CallKind
    """The leaf's kind: an agent turn, a final answer, or a compaction summary."""
    tokens: TokenIds
    loss_mask: bytes
    """1 on completion tokens this sample trains, 0 elsewhere (one byte per token)."""
    rollout_logprobs: Logprobs
    """The engine's logprob of each trained token; 0.0 elsewhere."""
    token_versions: array.array
    """Per token, the weight version that sampled it (``NO_VERSION`` for prompt tokens)."""
    images: tuple[ImageRef, ...]
    """Every image of ``tokens``, in prompt order (their pads are in ``tokens``)."""
    truncated: bool
    """Cut at ``max_seq_len`` (calls after the cut are not in it)."""

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def oldest_version(self) -> int:
        """The oldest weight version among the trained tokens (``NO_VERSION`` if none is trained)."""
        trained = [v for v, m in zip(self.token_versions, self.loss_mask, strict=True) if m]
        return min(trained) if trained else NO_VERSION


def oldest_trained_version(samples: Iterable[Sample]) -> int | None:
    """The oldest weight version among the tokens ``samples`` train (None: no trained token has one).
    The off-policy bound counts this token: a call sampled across a weight update (``in_place`` or
    ``retract``) counts its older part, and the untrained tokens of a lineage (a parent's completion
    trained in another sample, the prompt) count for nothing."""
    versions = [s.oldest_version for s in samples if s.oldest_version != NO_VERSION]
    return min(versions, default=None)


@dataclass(frozen=True)
class Assembly:
    """What ``assemble`` made of one episode's calls."""

    samples: tuple[Sample, ...]
    dropped_retries: tuple[str, ...]
    """Call ids of abandoned retries (not trained)."""
    too_long: tuple[str, ...]
    """Leaf call ids dropped because their first completion does not fit in ``max_seq_len``."""


def assemble(
    records: Iterable[CallRecord], *, max_seq_len: int | None = None, vocab: Vocabulary | None = None
) -> Assembly:
    """The samples of one episode attempt from its turn and summary records (any order); CallTreeError
    if they break what assembly (and, with ``vocab``, the model) relies on."""
    calls = sorted(records, key=lambda r: r.seq)
    if not calls:
        return Assembly((), (), ())
    by_id: dict[str, CallRecord] = {}
    children: dict[str | None, list[CallRecord]] = {}
    for call in calls:
        if call.call_id in by_id:
            raise CallTreeError(f"call {call.call_id} is recorded twice", [call.call_id])
        if (call.run_id, call.episode_id) != (calls[0].run_id, calls[0].episode_id):
            raise CallTreeError(f"call {call.call_id} belongs to another episode", [call.call_id])
        check_call(call, vocab)
        by_id[call.call_id] = call
        children.setdefault(call.parent_call_id, []).append(call)
    for call in calls:
        if call.parent_call_id is not None and call.parent_call_id not in by_id:
            raise CallTreeError(
                f"call {call.call_id} extends {call.parent_call_id}, which is not recorded", [call.call_id]
            )
    _check_acyclic(by_id)
    leaves = [c for c in calls if c.call_id not in children]
    dropped = [leaf for leaf in leaves if _was_retried(leaf, children)]
    kept = [leaf for leaf in leaves if leaf not in dropped]  # in seq order: first committed first
    owner: dict[str, str] = {}  # call id → the kept leaf that trains its completion
    for leaf in kept:
        for call in _lineage(leaf, by_id):
            owner.setdefault(call.call_id, leaf.call_id)
    samples: list[Sample] = []
    too_long: list[str] = []
    for leaf in kept:
        sample = _sample(leaf, _lineage(leaf, by_id), owner, max_seq_len)
        if sample is None:
            too_long.append(leaf.call_id)
        else:
            samples.append(sample)
    return Assembly(tuple(samples), tuple(c.call_id for c in dropped), tuple(too_long))


def check_call(call: CallRecord, vocab: Vocabulary | None = None) -> None:
    """CallTreeError unless ``call`` is consistent in itself (``checks.call_fault``; with ``vocab``, also
    what the model needs)."""
    if found := call_fault(call, vocab):
        check, fault = found
        raise CallTreeError(f"call {call.call_id}: {fault}", [call.call_id], check)


def _check_acyclic(by_id: dict[str, CallRecord]) -> None:
    """CallTreeError if parents form a cycle (walking up a lineage would never reach a root)."""
    done: set[str] = set()
    for start in by_id:
        path: list[str] = []
        on_path: set[str] = set()
        at: str | None = start
        while at is not None and at not in done:
            if at in on_path:
                cycle = path[path.index(at) :]
                raise CallTreeError(f"calls {' -> '.join(cycle)} -> {at} form a cycle", cycle)
            path.append(at)
            on_path.add(at)
            at = by_id[at].parent_call_id
        done.update(path)


def _was_retried(leaf: CallRecord, children: dict[str | None, list[CallRecord]]) -> bool:
    """A later sibling is the same request sent again (its prompt, images included, is the leaf's)."""
    return any(
        s.seq > leaf.seq and s.prompt_ids == leaf.prompt_ids and _shown(s) == _shown(leaf)
        for s in children[leaf.parent_call_id]
        if s is not leaf
    )


def _shown(call: CallRecord) -> tuple[str, ...]:
    """The screenshots of a call's prompt (equal pads can stand for different images)."""
    return tuple(ref.sha256 for ref in call.images)


def _lineage(leaf: CallRecord, by_id: dict[str, CallRecord]) -> list[CallRecord]:
    """Root first, ending with ``leaf``."""
    out = [leaf]
    while out[-1].parent_call_id is not None:
        out.append(by_id[out[-1].parent_call_id])
    return out[::-1]


def _sample(
    leaf: CallRecord, lineage: Sequence[CallRecord], owner: dict[str, str], max_seq_len: int | None
) -> Sample | None:
    tokens, logprobs = TokenIds(), Logprobs()
    mask = bytearray()
    versions = array.array("i")
    images: list[ImageRef] = []
    truncated = False
    for call in lineage:
        end = len(tokens) + len(call.prompt_ids) + len(call.completion_ids)
        if max_seq_len is not None and end > max_seq_len:
            truncated = True  # cut before this call: never inside a completion
            break
        n_prompt, n_completion = len(call.prompt_ids), len(call.completion_ids)
        tokens.extend(call.prompt_ids)
        tokens.extend(call.completion_ids)
        images.extend(call.images)
        trained = owner[call.call_id] == leaf.call_id
        mask.extend(b"\x00" * n_prompt + (b"\x01" if trained else b"\x00") * n_completion)
        logprobs.extend([0.0] * n_prompt)
        logprobs.extend(call.completion_logprobs if trained else [0.0] * n_completion)
        versions.extend([NO_VERSION] * n_prompt)
        versions.extend(completion_versions(call))
    if not any(mask):
        return None
    return Sample(
        run_id=leaf.run_id,
        group_id=leaf.group_id,
        episode_id=leaf.episode_id,
        leaf_call_id=leaf.call_id,
        kind=leaf.kind,
        tokens=tokens,
        loss_mask=bytes(mask),
        rollout_logprobs=logprobs,
        token_versions=versions,
        images=tuple(images),
        truncated=truncated,
    )


def completion_versions(call: CallRecord) -> list[int]:
    """The weight version of each completion token, from the call's version spans (its
    ``policy_version`` for tokens no span covers: records from engines that report one per call)."""
    out = [call.policy_version] * len(call.completion_ids)
    for span in call.weight_versions:
        out[span.start : span.end] = [span.version] * (min(span.end, len(out)) - span.start)
    return out
