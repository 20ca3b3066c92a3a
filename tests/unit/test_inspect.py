"""`cua-stream inspect`'s pure parts on records built by hand: a step rebuilt from its group's calls and
scores (the trainer's join, assembly and advantages) matches its TrainStep record, and any disagreement is
named; an episode's tree shows its retry, compaction, ignored attempt, sample owners and training step."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from consumers.trainer.inspect.episode import episode_view
from consumers.trainer.inspect.render import episode_text, step_document, step_text
from consumers.trainer.inspect.step import StepRules, rebuild_step, segments, version_runs
from cua_stream.bus.codec import Delivery
from cua_stream.config import ConfigError
from cua_stream.events import (
    CallKind,
    CallRecord,
    Discard,
    GroupDropped,
    Logprobs,
    Reward,
    ScoreEvent,
    SummaryEvent,
    TokenIds,
    TrainStep,
    TurnEvent,
    VersionSpan,
)

RUN, GROUP = "r", "r-g000000"


def call(
    episode: str,
    seq: int,
    parent: int | None,
    prompt: list[int],
    completion: list[int],
    *,
    attempt: int = 2,
    summary: bool = False,
    spans: tuple[VersionSpan, ...] = (),
) -> CallRecord:
    cls = SummaryEvent if summary else TurnEvent
    return cls(
        run_id=RUN,
        group_id=GROUP,
        episode_id=episode,
        attempt=attempt,
        seq=seq,
        call_id=f"{episode}-c{seq}" + (f"-a{attempt}" if attempt != 2 else ""),
        parent_call_id=None if parent is None else f"{episode}-c{parent}",
        kind=CallKind.COMPACTION_SUMMARY if summary else CallKind.AGENT_TURN,
        prompt_ids=TokenIds(prompt),
        completion_ids=TokenIds(completion),
        completion_logprobs=Logprobs([-0.5] * len(completion)),
        weight_versions=spans,
        policy_version=0,
        finish_reason="stop",
        started_at=0.0,
    )


def score(episode: str, value: float, attempt: int = 2) -> ScoreEvent:
    return ScoreEvent(
        run_id=RUN,
        group_id=GROUP,
        episode_id=episode,
        attempt=attempt,
        verdict=Reward(value=value),
        policy_version=0,
        scored_at=0.0,
    )


E0, E1 = f"{GROUP}-e0", f"{GROUP}-e1"
CALLS = [
    call(E0, 0, None, [1, 2, 3], [10, 11]),
    call(E0, 1, 0, [4, 5], [12, 13]),  # sent again as c2: abandoned
    call(
        E0,
        2,
        0,
        [4, 5],
        [14, 15, 16],
        spans=(VersionSpan(version=0, start=0, end=1), VersionSpan(version=1, start=1, end=3)),
    ),
    call(E0, 3, 2, [6], [17, 18], summary=True),  # the compaction: a leaf of the tree it summarised
    call(E0, 4, None, [7, 8, 9], [19, 20]),  # the new root after it
    call(E0, 0, None, [1], [99], attempt=1),  # an attempt cut short by a crash: never trained
    call(E1, 0, None, [1, 2, 3], [30], attempt=0),
]
SCORES = [score(E0, 1.0), score(E1, 0.0, attempt=0)]
TRAINED_TOKENS = 2 + 3 + 2 + 2 + 1  # c0, c2, c3, c4 of e0 (c1 abandoned); c0 of e1
STEP = TrainStep(
    run_id=RUN,
    step=1,
    policy_version=1,
    n_groups=1,
    n_episodes=2,
    n_samples=3,
    loss=0.1,
    group_ids=(GROUP,),
    metrics={"trained_tokens": float(TRAINED_TOKENS)},
    finished_at=0.0,
    attempts={E0: 2, E1: 0},
)


def deliveries() -> list[Delivery]:
    # a call delivered twice, and a second score of e1 (the trainer keeps the first)
    records = [*CALLS, CALLS[0], *SCORES, score(E1, 1.0, attempt=0)]
    other_run = msgspec.structs.replace(CALLS[0], run_id="other", call_id="x")
    return [
        Delivery(r, "t.scores" if isinstance(r, ScoreEvent) else "t.turns", 0, i, None, b"", (), 0)
        for i, r in enumerate([*records, other_run])
    ]


def test_the_rebuilt_step_is_the_batch_its_record_says_it_trained() -> None:
    batch = rebuild_step(STEP, deliveries(), StepRules())
    assert batch.mismatches == ()
    (group,) = batch.groups
    assert group.decision is not None and group.decision.train
    e0, e1 = group.episodes
    assert [s.leaf_call_id for s in e0.samples] == [f"{E0}-c3", f"{E0}-c4"]
    assert e0.advantage is not None and e0.advantage > 0 > (e1.advantage or 0)  # the first score counts
    assert (batch.n_episodes, batch.n_samples, batch.trained_tokens) == (2, 3, TRAINED_TOKENS)
    compaction = e0.samples[0]
    assert version_runs(compaction) == [(0, 3), (1, 2), (0, 2)]  # trained tokens only, in order
    assert [(t, b - a) for t, a, b in segments(compaction)] == [
        (False, 3), (True, 2), (False, 2), (True, 3), (False, 1), (True, 2)
    ]  # fmt: skip
    lines = list(step_text(batch, StepRules(), None))
    assert lines[-1].startswith("OK: the rebuilt batch is the one step 1 trained")
    assert any("versions v0×3, v1×2, v0×2" in line for line in lines)
    document = step_document(batch, StepRules(), None)
    assert document["matches"] and document["rebuilt"]["n_samples"] == 3


@pytest.mark.parametrize(
    ("step", "rules", "named"),
    [
        (msgspec.structs.replace(STEP, n_samples=4), StepRules(), "3 samples rebuilt, the step trained 4"),
        (STEP, StepRules(max_seq_len=4), "1 samples rebuilt, the step trained 3"),  # cuts the trainer did not make
        (msgspec.structs.replace(STEP, attempts={E0: 1, E1: 0}), StepRules(), "differ from the step's"),
        (msgspec.structs.replace(STEP, group_ids=(GROUP, "r-g000009"), n_groups=2), StepRules(), "r-g000009: no scores"),
        (msgspec.structs.replace(STEP, metrics={"trained_tokens": 5.0}), StepRules(), "trained tokens rebuilt"),
    ],
)  # fmt: skip
def test_a_step_record_the_records_do_not_rebuild_is_a_named_mismatch(
    step: TrainStep, rules: StepRules, named: str
) -> None:
    batch = rebuild_step(step, deliveries(), rules)
    assert any(named in m for m in batch.mismatches), batch.mismatches
    assert list(step_text(batch, rules, None))[-1].startswith("  !! ")


def test_a_discarded_episode_that_was_trained_is_a_mismatch() -> None:
    records = deliveries()
    discarded = msgspec.structs.replace(
        records[-3], event=msgspec.structs.replace(SCORES[1], verdict=Discard(reason="abandoned"))
    )
    batch = rebuild_step(STEP, [*records[:-3], discarded], StepRules())
    assert any("judged discarded" in m for m in batch.mismatches)


def test_under_on_stale_mask_the_rebuild_masks_the_tokens_the_step_masked() -> None:
    # trained at v2 with max_staleness 1: only e0's v1 tokens (2, in its compaction sample) are fresh;
    # its c4 sample and e1 (all v0) are left with nothing to train
    masked = msgspec.structs.replace(
        STEP, policy_version=3, n_episodes=1, n_samples=1, metrics={"trained_tokens": 2.0}
    )
    batch = rebuild_step(masked, deliveries(), StepRules(on_stale="mask", max_staleness=1))
    assert batch.mismatches == ()
    (compaction,) = batch.trained[0].samples
    assert version_runs(compaction) == [(1, 2)]
    assert rebuild_step(masked, deliveries(), StepRules()).mismatches  # the default masks nothing


def test_an_episodes_tree_shows_its_retry_compaction_attempts_owners_and_step() -> None:
    drop = GroupDropped(run_id=RUN, group_id="other", reason="timeout", trainer_version=0, dropped_at=0.0)
    events = [d.event for d in deliveries()]
    view = episode_view(RUN, E0, events, [STEP], [drop])  # type: ignore[arg-type]
    assert view is not None and view.trained_in is STEP and view.dropped is None
    assert [t.attempt for t in view.attempts] == [1, 2] and view.scored_attempt is view.attempts[1]
    nodes = {n.call.seq: n for n in view.attempts[1].calls}
    assert [n.call.seq for n in view.attempts[1].calls] == [0, 1, 2, 3, 4]  # depth first
    assert nodes[2].retry_of == f"{E0}-c1" and nodes[1].abandoned and nodes[1].owner is None
    assert {seq: n.owner for seq, n in nodes.items() if seq != 1} == {
        0: f"{E0}-c3", 2: f"{E0}-c3", 3: f"{E0}-c3", 4: f"{E0}-c4"
    }  # fmt: skip
    assert [n.depth for n in view.attempts[1].calls] == [0, 1, 1, 2, 0]
    text = "\n".join(episode_text(view, None))
    assert "trained in step 1" in text and "compaction (compaction_summary)" in text
    assert "abandoned retry, not trained" in text and "attempt 1 (not scored: ignored)" in text
    assert episode_view(RUN, "nobody", events) is None


def test_the_rules_come_from_the_trainer_section_and_the_options(tmp_path: Path) -> None:
    from cua_stream.cli.inspect import _rules, _text

    config = tmp_path / "run.toml"
    config.write_text(
        '[trainer]\nrun_id = "r"\nmodel_path = "/not/here"\nnegative_scale = 0.0\nmax_seq_len = 64\n'
    )
    assert _rules(config, None, None) == StepRules(negative_scale=0.0, max_seq_len=64)
    assert _rules(config, 128, 0.5) == StepRules(negative_scale=0.5, max_seq_len=128)  # the options win
    assert _rules(None, None, None) == StepRules()
    assert _text(None, config) is None  # a model path that is not here: token ids are shown
    config.write_text('[trainer]\nmax_seq_len = "long"\n')
    with pytest.raises(ConfigError, match=r"trainer\.max_seq_len"):
        _rules(config, None, None)
