"""One call through the engine and into the log (the chat path's steps 4 and 5): generate while the new
images are stored, build the call's record, publish it durably and only then add the call to the
session's tree. The call's preparation (steps 1-3) and its answer are ``service``'s."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import anyio
import anyio.to_thread
import msgspec

from cua_stream.blobs import BlobStore
from cua_stream.bus.producer import EventSink
from cua_stream.errors import EngineHTTPError, EngineProtocolError, EngineUnavailable
from cua_stream.events import CallRecord, ImageRef, TokenIds
from cua_stream.gateway.calltree import CallNode, Match
from cua_stream.gateway.chat_request import ChatCall
from cua_stream.gateway.engine_client import Engine, EngineReply, JsonIds, JsonStrings
from cua_stream.gateway.messages import assistant_reply
from cua_stream.gateway.metrics import GatewayMetrics
from cua_stream.gateway.records import build_record, topic_for
from cua_stream.gateway.refusal import Refusal
from cua_stream.gateway.rendering import PreparedImage, RenderedDelta
from cua_stream.gateway.retract import RetractWindow, generate_continuing
from cua_stream.gateway.session import Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A call ready for the engine: its id (also the engine's ``rid``), parent match and prompt."""

    call_id: str
    call: ChatCall
    match: Match
    delta: RenderedDelta
    prompt_ids: TokenIds
    delta_start: int
    prompt_json: JsonIds
    """``prompt_ids`` as the engine gets them (the history's are the parent's already-encoded ones)."""
    image_data: JsonStrings
    """Every image of the prompt, in prompt order (the engine needs them all); the history's are the
    parent's already-encoded ones."""


class Forced(NamedTuple):
    """A teacher's reply as the completion to record: its text and its ids (end-of-turn token included)."""

    text: str
    ids: list[int]


async def generate_storing_images(
    engine: Engine,
    blobs: BlobStore,
    session: Session,
    prepared: Prepared,
    forced: Forced | None = None,
    window: RetractWindow | None = None,
) -> tuple[EngineReply, tuple[ImageRef, ...]]:
    """Step 4, with step 5's image work (full decode, hash, blob write) done in a worker thread while
    the engine generates: the images are durable before the record is published, and their cost
    adds no latency to the turn. The image work always ends before this returns or raises; an engine
    error takes precedence over a storage error. A generation aborted for a retract-mode weight update
    (``window``) is continued under the new weights into one reply (``retract``)."""
    images = prepared.delta.images
    refs: tuple[ImageRef, ...] = ()
    store_error: Exception | None = None
    engine_error: Exception | None = None
    reply: EngineReply | None = None

    async def store() -> None:
        nonlocal refs, store_error
        try:
            refs = await anyio.to_thread.run_sync(store_images, blobs, images)
        except (OSError, Refusal) as e:
            store_error = e

    # A task group (not a stray task): the image work ends before this returns or raises, also when
    # the request is cancelled. Engine errors are raised after it, outside the group.
    async with anyio.create_task_group() as tg:
        if images:
            tg.start_soon(store)
        try:
            if forced is None:

                async def generate(ids: JsonIds, sampling: dict[str, Any], rid: str) -> EngineReply:
                    return await engine.generate(
                        ids, prepared.image_data, sampling, routing_key=session.session_id, rid=rid
                    )

                reply = await generate_continuing(
                    generate, prepared.prompt_json, prepared.call.sampling, prepared.call_id, window
                )
            else:
                reply = await engine.score(
                    prepared.prompt_json,
                    prepared.image_data,
                    forced.ids,
                    forced.text,
                    session.temperature,
                    routing_key=session.session_id,
                    rid=prepared.call_id,
                )
        except (EngineHTTPError, EngineUnavailable, EngineProtocolError) as e:
            engine_error = e
    if engine_error is not None:
        raise engine_error
    if store_error is not None:
        if isinstance(store_error, Refusal):  # bytes past the header are not base64
            raise store_error
        log.error("blob store write failed: %s", store_error)
        raise Refusal(503, f"the screenshots could not be stored ({store_error})", code="blob_store")
    assert reply is not None
    return reply, refs


def store_images(blobs: BlobStore, images: tuple[PreparedImage, ...]) -> tuple[ImageRef, ...]:
    """Decode, hash and store the new images (in a worker thread). A Refusal: bytes past the header
    are not base64."""
    refs: list[ImageRef] = []
    for image in images:
        data, ref = image.stored()
        blobs.put(data)
        refs.append(ref)
    return tuple(refs)


def record_of(
    session: Session,
    prepared: Prepared,
    reply: EngineReply,
    images: tuple[ImageRef, ...],
    started_at: float,
    gateway_ms: float,
) -> CallRecord:
    """The event for ``prepared`` with a provisional ``seq`` (the next one; fixed at commit)."""
    parent = prepared.match.parent
    return build_record(
        run_id=session.run_id,
        group_id=session.group_id,
        episode_id=session.episode_id,
        attempt=session.attempt,
        seq=session.next_seq,
        call_id=prepared.call_id,
        parent_call_id=parent.call_id if parent else None,
        kind=prepared.call.kind,
        delta_ids=TokenIds(prepared.prompt_ids[prepared.delta_start :]),
        images=images,
        reply=reply,
        sampling=prepared.call.sampling,
        started_at=started_at,
        gateway_ms=gateway_ms,
    )


async def publish_and_commit(
    sink: EventSink,
    lock: anyio.Lock,
    metrics: GatewayMetrics,
    session: Session,
    prepared: Prepared,
    reply: EngineReply,
    event: CallRecord,
) -> CallNode:
    """Step 5: under the session's lock, take the seq, publish durably, then add the call to the tree.
    If publishing fails the call is not in the tree (the client gets 503): the episode's records stay
    gap-free and a retry is recorded normally."""
    call = prepared.call
    async with lock:
        event = msgspec.structs.replace(event, seq=session.next_seq)
        try:
            await sink.publish(topic_for(call.kind), event)
        except Exception as e:  # any failure to make the record durable: the client must not get 200
            log.exception("publishing call %s of episode %s failed", event.call_id, session.episode_id)
            raise Refusal(
                503, f"the call could not be recorded ({type(e).__name__}); retry", code="record_failed"
            ) from e
        node = session.tree.add(
            call_id=prepared.call_id,
            match=prepared.match,
            messages=call.messages,
            seq=event.seq,
            kind=call.kind,
            reply=assistant_reply(reply.text),
            prompt_ids=prepared.prompt_ids,
            delta_start=prepared.delta_start,
            completion_ids=TokenIds(reply.output_ids),
            finish_reason=reply.finish_reason,
            image_json=tuple(prepared.image_data),
            ids_json=JsonIds.of(reply.output_ids, prepared.prompt_json).fragments,
        )
        session.record(node, kind_given=call.kind_given)
    metrics.recorded.inc(kind=call.kind.value)
    if not call.kind_given:
        metrics.missing_call_kind.inc()
    metrics.overhead_ms.inc(event.gateway_ms)
    metrics.engine_ms.inc(reply.engine_ms)
    return node
