"""One sample of every record type, shared by the event tests and the golden files."""

from __future__ import annotations

from cua_stream.events import (
    CallKind,
    DeadLetter,
    Discard,
    Event,
    ExceptionRecord,
    GroupDropped,
    ImageRef,
    Logprobs,
    OutcomeEvent,
    Phase,
    PolicyVersion,
    Reward,
    ScoreEvent,
    SummaryEvent,
    TaskRef,
    TokenIds,
    TrainStep,
    TurnEvent,
    VersionSpan,
    WorkRequest,
)

IDS = {"run_id": "run-7", "group_id": "grp-3", "episode_id": "ep-3-1"}
SHA = "ab" * 32

SAMPLES: dict[str, Event] = {
    "work_request": WorkRequest(
        **IDS,
        task=TaskRef(name="click-the-button", path="tasks/click"),
        sample_index=1,
        group_size=8,
        policy_version=4,
        created_at=1700000000.5,
        sampling={"temperature": 1.0, "max_tokens": 512},
    ),
    "turn": TurnEvent(
        **IDS,
        seq=2,
        call_id="call-2",
        parent_call_id="call-1",
        kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds([151644, 872, 198, 151652, 151655, 151653]),
        completion_ids=TokenIds([515, 151645]),
        completion_logprobs=Logprobs([-0.25, -1.5]),
        images=(ImageRef(sha256=SHA, size=1234, width=640, height=352, grid_thw=(1, 22, 40)),),
        weight_versions=(VersionSpan(version=4, start=0, end=2),),
        policy_version=4,
        finish_reason="stop",
        sampling={"temperature": 1.0},
        started_at=1700000001.0,
        engine_ms=12.5,
        gateway_ms=0.8,
    ),
    "summary": SummaryEvent(
        **IDS,
        seq=5,
        call_id="call-5",
        kind=CallKind.COMPACTION_SUMMARY,
        prompt_ids=TokenIds([1, 2, 3]),
        completion_ids=TokenIds([4, 5]),
        completion_logprobs=Logprobs([-0.1, -0.2]),
        policy_version=4,
        finish_reason="stop",
        started_at=1700000002.0,
    ),
    "outcome": OutcomeEvent(
        **IDS,
        task="click-the-button",
        policy_version=4,
        agent_started=True,
        exception=ExceptionRecord(
            type="RuntimeRequestError", message="screenshot failed", phase=Phase.AGENT, module="harbor.x"
        ),
        rewards=None,
        early_termination_reason=None,
        n_calls=6,
        n_turns=5,
        gateway_statuses=(503,),
        trial_name="click__abc",
        started_at=1700000000.0,
        finished_at=1700000060.0,
    ),
    "score": ScoreEvent(
        **IDS, verdict=Reward(value=1.0, reason="ok"), policy_version=4, scored_at=1700000061.0
    ),
    "score_discard": ScoreEvent(
        **IDS, verdict=Discard(reason="sandbox_lost"), policy_version=4, scored_at=1700000061.0
    ),
    "policy_version": PolicyVersion(
        run_id="run-7", version=5, weights_path="/ckpt/5", step=5, published_at=1.0
    ),
    "train_step": TrainStep(
        run_id="run-7",
        step=5,
        policy_version=5,
        n_groups=4,
        n_episodes=32,
        n_samples=40,
        loss=0.125,
        group_ids=("grp-1", "grp-3"),
        metrics={"grad_norm": 3.5},
        finished_at=2.0,
    ),
    "group_dropped": GroupDropped(
        run_id="run-7",
        group_id="grp-3",
        reason="discarded",
        detail="sandbox_lost",
        episode_ids=("ep-3-0", "ep-3-1"),
        trainer_version=5,
        dropped_at=4.0,
    ),
    "dead_letter": DeadLetter(
        run_id="run-7",
        reason="undecodable",
        error="bad msgpack",
        source_topic="cua.turns",
        partition=1,
        offset=42,
        key=b"grp-3",
        value=b"\xc1",
        headers=(("run_id", b"run-7"),),
        at=3.0,
    ),
}
