"""`cua-stream inspect`'s output: a rebuilt step or an episode's tree as lines of text, or as one JSON
document (the same facts, every token included)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from consumers.trainer.episodes.samples import Sample
from consumers.trainer.inspect.episode import AttemptTree, EpisodeView
from consumers.trainer.inspect.recompute import REL_TOL, Recomputation, TokenGap
from consumers.trainer.inspect.step import EpisodeBatch, StepBatch, StepRules, segments, version_runs
from cua_stream.events import SUMMARY_KINDS, Discard, Reward, ScoreEvent, to_builtins

Text = Callable[[Sequence[int]], str] | None
"""Token ids → text (the model's tokenizer), or None: show the ids."""

SHOWN_IDS = 24
SHOWN_CHARS = 600
_PADS = re.compile(r"(<\|image_pad\|>|<\|video_pad\|>)\1+")


# -- step -------------------------------------------------------------------------------------------


def step_text(batch: StepBatch, rules: StepRules, text: Text, *, full: bool = False) -> Iterator[str]:
    s = batch.step
    yield (
        f"run {s.run_id}, step {s.step} -> policy v{s.policy_version}: {s.n_groups} group(s), "
        f"{s.n_episodes} episodes, {s.n_samples} samples, loss {s.loss:.4f}"
    )
    yield f"  rules: {_rules(rules)}"
    for group in batch.groups:
        decision = group.decision
        verdict = (
            "trained" if decision and decision.train else group.error or f"{decision and decision.reason}"
        )
        yield f"group {group.group_id}: {verdict}"
        for episode in group.episodes:
            yield from _episode_lines(episode, text, full)
    yield from _verdict_lines(batch)


def _episode_lines(episode: EpisodeBatch, text: Text, full: bool) -> Iterator[str]:
    advantage = "not trained" if episode.advantage is None else f"advantage {episode.advantage:+.4f}"
    yield (
        f"  episode {episode.episode_id}: {_verdict(episode.verdict)}, attempt {episode.attempt}, "
        f"{advantage}, {len(episode.samples)} sample(s)"
    )
    for i, sample in enumerate(episode.samples, 1):
        yield f"    sample {i}/{len(episode.samples)}: {_sample_summary(sample)}"
        for trained, start, end in segments(sample):
            label = "TRAINED" if trained else "masked "
            yield f"      [{label} {start}:{end}] {_show(sample.tokens[start:end], text, full)}"


def _sample_summary(sample: Sample) -> str:
    n, trained = len(sample.tokens), sample.trained_tokens
    logprobs = [lp for lp, m in zip(sample.rollout_logprobs, sample.loss_mask, strict=True) if m]
    mean = statistics.fmean(logprobs) if logprobs else 0.0
    images = ", ".join(ref.sha256[:12] for ref in sample.images) or "none"
    return (
        f"leaf {sample.leaf_call_id} ({sample.kind}), {n} tokens = {n - trained} masked + {trained} "
        f"trained{', truncated' if sample.truncated else ''}; versions {_runs(version_runs(sample))}; "
        f"rollout logprob mean {mean:.3f} min {min(logprobs, default=0.0):.3f}; images {images}"
    )


def _verdict_lines(batch: StepBatch) -> Iterator[str]:
    counts = (
        f"{len(batch.groups)} groups, {batch.n_episodes} episodes, {batch.n_samples} samples, "
        f"{batch.trained_tokens} trained tokens"
    )
    if not batch.mismatches:
        yield f"OK: the rebuilt batch is the one step {batch.step.step} trained ({counts})"
        return
    yield f"MISMATCH: the rebuilt batch ({counts}) is not the one step {batch.step.step} trained:"
    for problem in batch.mismatches:
        yield f"  !! {problem}"


def step_document(batch: StepBatch, rules: StepRules, text: Text) -> dict[str, Any]:
    return {
        "record": to_builtins(batch.step),
        "rules": msgspec.to_builtins(rules),
        "matches": not batch.mismatches,
        "mismatches": list(batch.mismatches),
        "rebuilt": {
            "group_ids": [g.group_id for g in batch.groups],
            "n_episodes": batch.n_episodes,
            "n_samples": batch.n_samples,
            "trained_tokens": batch.trained_tokens,
        },
        "groups": [
            {
                "group_id": g.group_id,
                "trained": bool(g.decision and g.decision.train),
                "reason": g.decision.reason if g.decision else None,
                "detail": g.decision.detail if g.decision else g.error,
                "episodes": [
                    {
                        "episode_id": e.episode_id,
                        "verdict": msgspec.to_builtins(e.verdict),
                        "attempt": e.attempt,
                        "advantage": e.advantage,
                        "samples": [_sample_document(s, text) for s in e.samples],
                    }
                    for e in g.episodes
                ],
            }
            for g in batch.groups
        ],
    }


def _sample_document(sample: Sample, text: Text) -> dict[str, Any]:
    return {
        "leaf_call_id": sample.leaf_call_id,
        "kind": str(sample.kind),
        "n_tokens": len(sample.tokens),
        "trained_tokens": sample.trained_tokens,
        "truncated": sample.truncated,
        "images": [ref.sha256 for ref in sample.images],
        "versions": [[v, n] for v, n in version_runs(sample)],
        "tokens": sample.tokens.tolist(),
        "loss_mask": list(sample.loss_mask),
        "rollout_logprobs": sample.rollout_logprobs.tolist(),
        "segments": [
            {"trained": t, "start": a, "end": b, **({"text": text(sample.tokens[a:b])} if text else {})}
            for t, a, b in segments(sample)
        ],
    }


# -- recompute -------------------------------------------------------------------------------------


def recompute_text(r: Recomputation, text: Text) -> Iterator[str]:
    yield f"recomputed from v{r.start_version}'s weights (the trainer's backend, on this machine):"
    yield f"  {'metric':<16}{'recorded':>16}{'recomputed':>16}  "
    for c in r.checks:
        recorded = "-" if c.recorded is None else f"{c.recorded:.9g}"
        verdict = {True: "equal", False: "DIFFERS", None: c.note}[c.agrees]
        yield f"  {c.name:<16}{recorded:>16}{c.recomputed:>16.9g}  {verdict}"
    yield f"tokens where the trainer and the engine disagree most (top {len(r.gaps)} by |Δlogprob|):"
    for g in r.gaps:
        yield (
            f"  Δ {g.delta:+.4f}  trainer {g.trainer:.4f} engine {g.engine:.4f} (v{g.version})  "
            f"{g.leaf_call_id}[{g.position}] {_token(g, text)}"
        )
    if r.agrees:
        yield f"OK: the recomputed step equals its record (relative tolerance {REL_TOL:g})"
    else:
        names = ", ".join(c.name for c in r.checks if c.agrees is False)
        yield f"MISMATCH: recomputed {names} differ from the record: not the weights, batch or loss it had"


def recompute_document(r: Recomputation, text: Text) -> dict[str, Any]:
    return {
        "start_version": r.start_version,
        "agrees": r.agrees,
        "rel_tol": REL_TOL,
        "metrics": [
            {
                "name": c.name,
                "recorded": c.recorded,
                "recomputed": c.recomputed,
                "agrees": c.agrees,
                "note": c.note,
            }
            for c in r.checks
        ],
        "token_gaps": [
            {
                "episode_id": g.episode_id,
                "leaf_call_id": g.leaf_call_id,
                "position": g.position,
                "token_id": g.token_id,
                **({"text": text([g.token_id])} if text else {}),
                "trainer": g.trainer,
                "engine": g.engine,
                "delta": g.delta,
                "version": g.version,
            }
            for g in r.gaps
        ],
    }


def _token(gap: TokenGap, text: Text) -> str:
    return repr(text([gap.token_id])) if text else f"id {gap.token_id}"


# -- episode ----------------------------------------------------------------------------------------


def episode_text(view: EpisodeView, text: Text, *, full: bool = False) -> Iterator[str]:
    yield f"episode {view.episode_id} (group {view.group_id})"
    yield f"  score: {_score(view.score)}"
    yield f"  training: {_training(view)}"
    for tree in view.attempts:
        scored = view.score is not None and tree.attempt == view.score.attempt
        yield f"attempt {tree.attempt}{' (scored: the one trained)' if scored else ' (not scored: ignored)'}"
        if tree.error:
            yield f"  !! the calls do not assemble: {tree.error}"
        yield from _tree_lines(tree)
        for sample in tree.samples:
            yield f"  sample {sample.leaf_call_id}: {_sample_summary(sample)}"
            if full or text:
                for trained, start, end in segments(sample):
                    label = "TRAINED" if trained else "masked "
                    yield f"    [{label} {start}:{end}] {_show(sample.tokens[start:end], text, full)}"
        for leaf in tree.too_long:
            yield f"  leaf {leaf}: its first completion does not fit in max_seq_len (no sample)"


def _tree_lines(tree: AttemptTree) -> Iterator[str]:
    for node in tree.calls:
        call = node.call
        kind = f"compaction ({call.kind})" if call.kind in SUMMARY_KINDS else str(call.kind)
        link = f"extends {call.parent_call_id}" if call.parent_call_id else "root"
        if node.retry_of:
            link += f", retry of {node.retry_of}"
        trained = (
            "abandoned retry, not trained"
            if node.abandoned
            else (f"trained in sample {node.owner}" if node.owner else "not trained")
        )
        yield (
            f"  {'  ' * node.depth}#{call.seq} {call.call_id} {kind}, {link}: {len(call.prompt_ids)} prompt + "
            f"{len(call.completion_ids)} completion tokens, v{call.policy_version}, {call.finish_reason}, "
            f"{len(call.images)} image(s); {trained}"
        )


def episode_document(view: EpisodeView, text: Text) -> dict[str, Any]:
    return {
        "episode_id": view.episode_id,
        "group_id": view.group_id,
        "score": to_builtins(view.score) if view.score else None,
        "trained_in_step": view.trained_in.step if view.trained_in else None,
        "dropped": to_builtins(view.dropped) if view.dropped else None,
        "attempts": [
            {
                "attempt": tree.attempt,
                "scored": view.score is not None and tree.attempt == view.score.attempt,
                "error": tree.error,
                "too_long": list(tree.too_long),
                "calls": [
                    {
                        "seq": n.call.seq,
                        "call_id": n.call.call_id,
                        "parent_call_id": n.call.parent_call_id,
                        "kind": str(n.call.kind),
                        "depth": n.depth,
                        "retry_of": n.retry_of,
                        "abandoned": n.abandoned,
                        "trained_in_sample": n.owner,
                        "prompt_tokens": len(n.call.prompt_ids),
                        "completion_tokens": len(n.call.completion_ids),
                        "policy_version": n.call.policy_version,
                        "images": [ref.sha256 for ref in n.call.images],
                    }
                    for n in tree.calls
                ],
                "samples": [_sample_document(s, text) for s in tree.samples],
            }
            for tree in view.attempts
        ],
    }


# -- pieces -----------------------------------------------------------------------------------------


def _show(ids: Sequence[int], text: Text, full: bool) -> str:
    if text is None:
        shown = list(ids) if full or len(ids) <= SHOWN_IDS else list(ids[:SHOWN_IDS])
        more = "" if len(shown) == len(ids) else f" ... ({len(ids) - len(shown)} more)"
        return f"ids {shown}{more}"
    decoded = _PADS.sub(lambda m: f"{m.group(1)}×{len(m.group(0)) // len(m.group(1))}", text(ids))
    if not full and len(decoded) > SHOWN_CHARS:
        half = SHOWN_CHARS // 2
        decoded = f"{decoded[:half]} [... {len(decoded) - SHOWN_CHARS} chars ...] {decoded[-half:]}"
    return repr(decoded)


def _runs(runs: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"v{v}×{n}" for v, n in runs) or "none"


def _verdict(verdict: Reward | Discard) -> str:
    if isinstance(verdict, Reward):
        return f"reward {verdict.value:g} ({verdict.reason})"
    return f"discarded ({verdict.reason})"


def _score(score: ScoreEvent | None) -> str:
    if score is None:
        return "not scored yet"
    return f"{_verdict(score.verdict)}, attempt {score.attempt}, policy v{score.policy_version}"


def _training(view: EpisodeView) -> str:
    if view.trained_in is not None:
        s = view.trained_in
        return f"trained in step {s.step} (-> v{s.policy_version}, attempt {s.attempts.get(view.episode_id)})"
    if view.dropped is not None:
        return f"its group was dropped: {view.dropped.reason} ({view.dropped.detail})"
    return "not trained (yet)"


def _rules(rules: StepRules) -> str:
    return ", ".join(f"{k} {v}" for k, v in msgspec.structs.asdict(rules).items())
