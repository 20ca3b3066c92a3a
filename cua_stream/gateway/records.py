"""A recorded call → its event (TurnEvent, or SummaryEvent for compactor calls) and its topic. Pure."""

from __future__ import annotations

from typing import Any

from cua_stream.events import (
    SUMMARY_KINDS,
    CallKind,
    CallRecord,
    ImageRef,
    Logprobs,
    SummaryEvent,
    TokenIds,
    TurnEvent,
)
from cua_stream.gateway.engine_client import EngineReply
from cua_stream.topics import SUMMARIES, TURNS, TopicSpec


def topic_for(kind: CallKind) -> TopicSpec:
    return SUMMARIES if kind in SUMMARY_KINDS else TURNS


def build_record(
    *,
    run_id: str,
    group_id: str,
    episode_id: str,
    attempt: int = 0,
    seq: int,
    call_id: str,
    parent_call_id: str | None,
    kind: CallKind,
    delta_ids: TokenIds,
    images: tuple[ImageRef, ...],
    reply: EngineReply,
    sampling: dict[str, Any],
    started_at: float,
    gateway_ms: float,
) -> CallRecord:
    cls = SummaryEvent if kind in SUMMARY_KINDS else TurnEvent
    return cls(
        run_id=run_id,
        group_id=group_id,
        episode_id=episode_id,
        attempt=attempt,
        seq=seq,
        call_id=call_id,
        parent_call_id=parent_call_id,
        kind=kind,
        prompt_ids=delta_ids,
        completion_ids=TokenIds(reply.output_ids),
        completion_logprobs=Logprobs(reply.logprobs),
        images=images,
        weight_versions=reply.weight_versions,
        policy_version=min(span.version for span in reply.weight_versions),
        finish_reason=reply.finish_reason,
        sampling=sampling,
        started_at=started_at,
        engine_ms=reply.engine_ms,
        gateway_ms=gateway_ms,
    )
