"""Episode shapes for the load generator (``bench/fixtures/episode_shapes``): recorded turn and summary
records become empirical samples (text tokens net of image pad tokens, completion lengths, screenshot
sizes, turn counts, compactions), and the sampler draws episodes only from them."""

from __future__ import annotations

import json
import random

import pytest

from bench.fixtures.episode_shapes import (
    DEFAULT_SHAPES,
    call_records_of_tap_lines,
    sample_episode,
    shapes_from_records,
)
from cua_stream.events import (
    CallKind,
    ImageRef,
    Logprobs,
    OutcomeEvent,
    SummaryEvent,
    TokenIds,
    TurnEvent,
    to_builtins,
)


def turn(episode: str, seq: int, prompt: int, completion: int, *, root: bool = False, kb: int = 100,
         summary: bool = False) -> TurnEvent | SummaryEvent:  # fmt: skip
    image = ImageRef(sha256="ab" * 32, size=kb * 1024, width=1280, height=720, grid_thw=(1, 46, 80))
    cls = SummaryEvent if summary else TurnEvent
    return cls(
        run_id="r", group_id="g", episode_id=episode, seq=seq, call_id=f"{episode}-{seq}",
        parent_call_id=None if root or seq == 0 else f"{episode}-{seq - 1}",
        kind=CallKind.COMPACTION_SUMMARY if summary else CallKind.AGENT_TURN,
        prompt_ids=TokenIds(range(prompt)), completion_ids=TokenIds(range(completion)),
        completion_logprobs=Logprobs([-0.5] * completion), images=(image,), policy_version=0,
        finish_reason="stop", started_at=0.0,
    )  # fmt: skip


IMAGE = 46 * 80 // 4  # 920 pad tokens


def test_records_become_samples_net_of_image_tokens() -> None:
    records = [
        turn("a", 0, IMAGE + 1500, 100),
        turn("a", 1, IMAGE + 40, 200),
        turn("a", 2, IMAGE + 60, 300, root=True, kb=150),  # a new root after the first: a compaction
        turn("b", 0, IMAGE + 1200, 120),
        turn("b", 1, IMAGE + 30, 80),
        OutcomeEvent(
            run_id="r",
            group_id="g",
            episode_id="b",
            task="t",
            policy_version=0,
            agent_started=True,
            started_at=0.0,
            finished_at=1.0,
        ),
    ]
    shapes = shapes_from_records(reversed(records), source="test")  # order does not matter
    assert sorted(shapes.turn_counts) == [2, 3]
    assert sorted(shapes.first_text_tokens) == [1200, 1500]
    assert sorted(shapes.text_tokens) == [30, 40, 60]
    assert sorted(shapes.completion_tokens) == [80, 100, 120, 200, 300]
    assert sorted(shapes.screenshot_bytes) == [100 * 1024] * 4 + [150 * 1024]
    assert shapes.screenshot_size == (1280, 720)
    assert shapes.compactions_per_turn == pytest.approx(1 / 5)
    assert shapes.source == "test: 2 episodes, 5 turns"


def test_a_summary_record_counts_as_a_compaction_not_a_turn() -> None:
    shapes = shapes_from_records([turn("a", 0, 2000, 10), turn("a", 1, 10, 50, summary=True),
                                  turn("a", 2, 30, 10)])  # fmt: skip
    assert shapes.turn_counts == (2,) and shapes.compactions_per_turn == pytest.approx(1 / 2)


def test_no_turn_record_is_an_error() -> None:
    with pytest.raises(ValueError, match="no turn records"):
        shapes_from_records([])


def test_episodes_are_drawn_from_the_samples_only() -> None:
    rng = random.Random(3)
    shapes = DEFAULT_SHAPES
    episodes = [sample_episode(shapes, rng) for _ in range(200)]
    assert {len(e) for e in episodes} <= set(shapes.turn_counts)
    assert all(e[0].text_tokens in shapes.first_text_tokens and not e[0].compaction for e in episodes)
    later = [t for e in episodes for t in e[1:]]
    assert {t.text_tokens for t in later} <= set(shapes.text_tokens)
    assert {t.completion_tokens for e in episodes for t in e} <= set(shapes.completion_tokens)
    assert {t.screenshot_bytes for e in episodes for t in e} <= set(shapes.screenshot_bytes)
    rate = sum(t.compaction for t in later) / len(later)
    assert 0.01 < rate < 0.08  # 0.04 stated; 200 episodes of ~25 turns
    assert sample_episode(shapes, random.Random(3)) == episodes[0]  # seeded: the same episode


def test_tap_json_lines_give_back_the_call_records() -> None:
    records = [turn("a", 0, IMAGE + 1500, 100), turn("a", 1, 50, 20, summary=True)]
    lines = [json.dumps({"topic": "cua.turns", "event": to_builtins(r)}) for r in records]
    lines += ["", json.dumps({"event": {"type": "outcome"}}), json.dumps({"event": {"type": "turn"}})]
    assert list(call_records_of_tap_lines(lines)) == records  # the outcome and the broken turn skipped
