"""The trainer's join, fed by hand: groups complete on their last score, wait for their calls (the
barrier), skip other runs, decided groups and duplicates, time out, and say where a restart resumes."""

from __future__ import annotations

from consumers.trainer.stream.join import Join
from cua_stream.bus.codec import Delivery
from cua_stream.events import CallKind, Logprobs, Reward, ScoreEvent, TokenIds, TurnEvent


def turn(group: str, episode: str, seq: int, run: str = "r") -> TurnEvent:
    return TurnEvent(
        run_id=run,
        group_id=group,
        episode_id=episode,
        seq=seq,
        call_id=f"{episode}-c{seq}",
        kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds([1]),
        completion_ids=TokenIds([2]),
        completion_logprobs=Logprobs([-0.1]),
        policy_version=0,
        finish_reason="stop",
        started_at=0.0,
    )


def score(group: str, episode: str, run: str = "r") -> ScoreEvent:
    return ScoreEvent(
        run_id=run,
        group_id=group,
        episode_id=episode,
        verdict=Reward(value=1.0),
        policy_version=0,
        scored_at=0,
    )


def at(event: object, topic: str, offset: int, partition: int = 1) -> Delivery:
    return Delivery(event, topic, partition, offset, None, b"", (), 0)  # type: ignore[arg-type]


def test_a_group_is_ready_once_scored_and_its_calls_are_consumed() -> None:
    join = Join("r", group_size=2, call_topics=["t.turns", "t.summaries"])
    assert join.add(at(turn("g", "e0", 0), "t.turns", 10), now=0) is None
    assert join.add(at(score("g", "e0"), "t.scores", 3), now=0) is None
    complete = join.add(at(score("g", "e1"), "t.scores", 4), now=0)  # e1's turn is not read yet
    assert complete is not None and join.call_partitions(complete) == [("t.turns", 1), ("t.summaries", 1)]
    complete.barrier = {("t.turns", 1): 12, ("t.summaries", 1): 0}
    assert join.ready({("t.turns", 1): 11}) == []
    join.add(at(turn("g", "e1", 0), "t.turns", 11), now=0)
    (ready,) = join.ready({("t.turns", 1): 12, ("t.summaries", 1): 0})
    assert {k: len(v.calls) for k, v in ready.episodes.items()} == {"e0": 1, "e1": 1}


def test_other_runs_decided_groups_and_duplicates_are_skipped() -> None:
    join = Join("r", group_size=1, call_topics=["t.turns"], decided=["old"])
    join.add(at(turn("g", "e0", 0, run="other"), "t.turns", 0), now=0)
    join.add(at(turn("old", "e0", 0), "t.turns", 1), now=0)
    join.add(at(turn("g", "e0", 0), "t.turns", 2), now=0)
    join.add(at(turn("g", "e0", 0), "t.turns", 2), now=0)  # redelivered
    assert list(join.groups) == ["g"] and len(join.groups["g"].episodes["e0"].calls) == 1
    assert join.add(at(score("g", "e0"), "t.scores", 0), now=0) is not None
    assert join.add(at(score("g", "e0"), "t.scores", 1), now=0) is None  # a second score changes nothing
    join.close("g")
    assert join.groups == {} and join.add(at(turn("g", "e0", 1), "t.turns", 3), now=0) is None


def test_incomplete_groups_time_out_even_when_nothing_arrived() -> None:
    join = Join("r", group_size=2, call_topics=["t.turns"])
    join.expect("silent", now=0)
    join.add(at(score("half", "e0"), "t.scores", 0), now=5)
    assert [g.group_id for g in join.timed_out(now=20, timeout_s=10)] == ["silent", "half"]
    assert join.timed_out(now=10, timeout_s=10) == []


def test_a_restart_resumes_from_the_first_record_of_an_open_group() -> None:
    join = Join("r", group_size=2, call_topics=["t.turns"])
    join.add(at(turn("a", "e0", 0), "t.turns", 5), now=0)
    join.add(at(turn("b", "e0", 0), "t.turns", 9), now=0)
    join.add(at(score("b", "e0"), "t.scores", 2), now=0)
    positions = {("t.turns", 1): 20, ("t.scores", 1): 7, ("t.turns", 0): 4}
    assert join.resume_offsets(positions) == {("t.turns", 1): 5, ("t.scores", 1): 2, ("t.turns", 0): 4}
    join.close("a")
    assert join.resume_offsets(positions)[("t.turns", 1)] == 9
