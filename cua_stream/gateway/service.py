"""The gateway service: the chat path, over the session table (``sessions``) and the drain gate
(``drain``). I/O (engine, blob store, event sink) is injected; the TITO decisions live in the pure
modules it calls.

The chat path, in order (steps 4 and 5 in ``recording``):

1. Refuse early: unknown session (404), draining (503, after holding the call up to ``drain_hold_s``
   for the weight update to finish), invalid request or temperature (400). The body is read once
   (``chat_request.read_body``), past the messages it shares byte for byte with the session's
   previous request (request_prefix).
2. Match the parent call (calltree); refuse to extend a reply cut by length (409).
3. Render only the new part (rendering): the parent's exact ids + glue + appended messages.
4. Call the engine's /generate (the history's ids and images go in as the parent's JSON); a session
   with a teacher has the teacher's reply scored instead (``teacher``: a forced completion). A non-2xx
   reply is passed through, an unreachable engine is 503, an invalid reply 502, an aborted generation
   503: none of them is recorded.
5. Store new images in the blob store (in a worker thread, during the engine call), then, under the
   session's lock, take the next ``seq``, publish the record and wait until it is durable, and only
   then add the call to the tree.
6. Answer the client. If publishing failed the client gets 503 and the call is not in the tree, so
   the episode's records stay gap-free and a retry is recorded normally.

Every non-2xx answer to a known session is appended to its ``statuses``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import anyio.to_thread

from cua_stream.blobs import BlobStore
from cua_stream.bus.producer import EventSink
from cua_stream.engine.params import SamplingParams
from cua_stream.errors import EngineHTTPError, EngineProtocolError, EngineUnavailable
from cua_stream.gateway.calltree import Match
from cua_stream.gateway.chat_request import ChatCall, parse_chat_request
from cua_stream.gateway.drain import DrainGate
from cua_stream.gateway.engine_client import Engine, JsonIds, JsonStrings, engine_error_message
from cua_stream.gateway.metrics import GatewayMetrics
from cua_stream.gateway.openai_format import Reply, completion_body, refusal_reply, stream_body
from cua_stream.gateway.priority import LANES, EngineSlots, priority_of
from cua_stream.gateway.recording import (
    Forced,
    Prepared,
    generate_storing_images,
    publish_and_commit,
    record_of,
)
from cua_stream.gateway.refusal import Refusal
from cua_stream.gateway.rendering import RenderedDelta, Renderer
from cua_stream.gateway.retract import RetractWindow
from cua_stream.gateway.session import Session, SessionSpec
from cua_stream.gateway.sessions import SessionTable
from cua_stream.gateway.teacher import Teacher

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = SamplingParams().max_new_tokens
"""A call's completion cap when neither the request nor the session sets one (SGLang's default)."""
_INLINE_RENDER_CHARS = 32_768
"""New text up to this size is rendered on the event loop (well under a millisecond); more goes to a thread."""
_ENGINE_CHECK_S = 1.0
"""Readiness probes within this long of the last engine health check reuse its answer."""


class Gateway:
    def __init__(
        self,
        *,
        renderer: Renderer,
        engine: Engine,
        sink: EventSink,
        blobs: BlobStore,
        drain_hold_s: float = 0.0,
        max_new_tokens_cap: int = 4096,
        context_length: int = 262_144,
        session_idle_timeout_s: float = 1800.0,
        max_sessions: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        teacher: Teacher | None = None,
        engine_max_in_flight: int | None = None,
    ) -> None:
        self.renderer = renderer
        self.teacher = teacher
        self.engine = engine
        self.sink = sink
        self.blobs = blobs
        self.context_length = context_length
        self._clock = clock
        self.metrics = GatewayMetrics()
        self.table = SessionTable(
            renderer=renderer,
            metrics=self.metrics,
            max_new_tokens_cap=max_new_tokens_cap,
            has_teacher=teacher is not None,
            idle_timeout_s=session_idle_timeout_s,
            max_sessions=max_sessions,
            clock=clock,
        )
        self.gate = DrainGate(drain_hold_s)
        self.retract = RetractWindow()
        """Open while a retract-mode weight update runs: the calls it aborts are continued."""
        self.engine_slots = EngineSlots(engine_max_in_flight)
        self._engine_checked: tuple[float, bool, str] | None = None

    # -- sessions and drain: their own homes (``sessions``, ``drain``), named here for the app -----------

    @property
    def sessions(self) -> dict[str, Session]:
        return self.table.open

    @property
    def draining(self) -> bool:
        return self.gate.draining

    @property
    def in_flight(self) -> int:
        return self.gate.in_flight

    def create_session(self, spec: SessionSpec) -> Session:
        return self.table.create(spec)

    def get_session(self, session_id: str) -> Session:
        return self.table.get(session_id)

    def describe(self, session: Session) -> dict[str, Any]:
        return self.table.describe(session)

    def delete_session(self, session_id: str) -> dict[str, Any]:
        return self.table.delete(session_id)

    def expire_idle(self) -> int:
        return self.table.expire_idle()

    def engine_waiting(self) -> dict[str, int]:
        """Calls waiting for an engine slot, by lane (``priority``)."""
        return {lane: self.engine_slots.waiting(p) for p, lane in LANES.items()}

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        return await self.gate.drain(timeout_s)

    def resume(self) -> dict[str, Any]:
        return self.gate.resume()

    def pause_generation(self, mode: str) -> None:
        """The trainer is about to pause the engine in ``mode`` (SGLang's modes) for a weight update.
        ``retract``: the calls it aborts are continued under the new weights until
        ``continue_generation``; ``in_place`` and ``abort`` need nothing of the gateway (an abort is
        refused as any engine abort is)."""
        if mode == "retract":
            self.retract.begin()

    def continue_generation(self) -> None:
        self.retract.end()

    def drain_status(self) -> dict[str, Any]:
        return self.gate.status()

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, detail): ready to serve chat calls when the engine answers its health check and the
        gateway is not draining. Liveness (the process answers) is ``/health``; this is ``/ready``."""
        now = self._clock()
        if self._engine_checked is None or now - self._engine_checked[0] > _ENGINE_CHECK_S:
            self._engine_checked = (now, *(await self.engine.health()))
            self.metrics.engine_up.set(int(self._engine_checked[1]))
        _, engine_ok, detail = self._engine_checked
        return engine_ok and not self.draining, {
            "engine": detail,
            "draining": self.draining,
            "sessions": len(self.sessions),
            "in_flight": self.in_flight,
        }

    @property
    def engine_state(self) -> str:
        """The engine's state at the last readiness check ("unknown" before the first)."""
        return "unknown" if self._engine_checked is None else self._engine_checked[2]

    # -- chat -----------------------------------------------------------------------------------------

    async def chat(self, session_id: str, body: bytes | dict[str, Any]) -> Reply:
        """Serve one chat-completions request; ``body`` is the raw JSON or already decoded."""
        reply = await self._chat(session_id, body)
        self.metrics.responses.inc(status=str(reply.status))
        session = self.sessions.get(session_id)
        if session is not None and reply.status // 100 != 2:
            session.statuses.append(reply.status)
        return reply

    async def _chat(self, session_id: str, body: bytes | dict[str, Any]) -> Reply:
        started_at = time.time()
        try:
            session = self.table.get(session_id)
            await self.gate.admit()  # held while a weight update drains the gateway, then 503
            t0 = time.perf_counter()  # gateway_ms counts the gateway's work, not a drain hold
            call = parse_chat_request(body, session)
        except Refusal as r:
            return refusal_reply(r)
        session.known_request = call.known
        session.in_flight += 1
        session.last_active = self._clock()
        try:
            with self.gate.in_flight_call():
                return await self._generate_and_record(session, call, started_at, t0)
        except Refusal as r:
            return refusal_reply(r)
        except EngineHTTPError as e:
            return refusal_reply(Refusal(e.status, engine_error_message(e), code="engine_error"))
        except EngineUnavailable as e:
            return refusal_reply(Refusal(503, str(e), code="engine_unavailable"))
        except EngineProtocolError as e:
            return refusal_reply(Refusal(502, f"invalid engine reply: {e}", code="engine_protocol"))
        except anyio.get_cancelled_exc_class():
            self.metrics.cancelled.inc()  # the client went away (the engine client aborted the engine's work)
            raise
        finally:
            session.in_flight -= 1
            session.last_active = self._clock()

    async def prepare_async(self, session: Session, call: ChatCall) -> Prepared:
        """``prepare``, with a large new part rendered and tokenized in a worker thread: megabytes of
        text take a second, and the event loop serves every other session (and /health) meanwhile. The
        call tree is read on the event loop only."""
        match = self.match_parent(session, call)
        new = call.messages[match.start :]
        if sum(len(p) for m in new for p in m.parts if isinstance(p, str)) <= _INLINE_RENDER_CHARS:
            return self.prepare(session, call, match)
        after = match.parent.completion_ids if match.parent else None
        delta = await anyio.to_thread.run_sync(
            lambda: self.renderer.render_delta(new, after_completion=after)
        )
        return self.prepare(session, call, match, delta)

    def match_parent(self, session: Session, call: ChatCall) -> Match:
        """Step 2: the call this request extends; 409 if that reply was cut by length."""
        match = session.tree.match(call.messages)
        parent = match.parent
        if parent is not None and parent.cut_by_length:
            raise Refusal(
                409,
                f"this request extends call {parent.call_id}, whose reply was cut by length; "
                "a truncated reply cannot be continued",
                code="truncated_parent",
            )
        return match

    def prepare(
        self, session: Session, call: ChatCall, match: Match | None = None, delta: RenderedDelta | None = None
    ) -> Prepared:
        """Steps 2-3: match the parent and build the prompt ids (synchronous, no I/O); the completion is
        capped by ``max_new_tokens_cap`` and by the room the context length leaves."""
        match = match or self.match_parent(session, call)
        parent = match.parent
        if delta is None:
            delta = self.renderer.render_delta(
                call.messages[match.start :], after_completion=parent.completion_ids if parent else None
            )
        if parent is None:
            prompt_ids, delta_start, before = delta.ids, 0, None
        else:
            prompt_ids = parent.full_ids()
            delta_start = len(prompt_ids)
            before = JsonIds(parent.ids_json, delta_start)
            prompt_ids.extend(delta.ids)
        room = self.context_length - len(prompt_ids)
        if room < 1:
            # OpenAI's wording and code: LiteLLM maps it to ContextWindowExceededError, and computer-1
            # answers that by compacting its history.
            raise Refusal(
                400,
                f"This model's maximum context length is {self.context_length} tokens. However, your "
                f"messages resulted in {len(prompt_ids)} tokens.",
                code="context_length_exceeded",
            )
        asked = call.sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        call = replace(
            call,
            sampling={**call.sampling, "max_new_tokens": min(asked, self.table.max_new_tokens_cap, room)},
        )
        return Prepared(
            call_id=uuid.uuid4().hex,
            call=call,
            match=match,
            delta=delta,
            prompt_ids=prompt_ids,
            delta_start=delta_start,
            prompt_json=JsonIds.of(delta.ids, before),
            image_data=JsonStrings(
                (parent.image_json if parent else ())
                + tuple(p.json for m in call.messages[match.start :] for p in m.images())
            ),
        )

    async def _generate_and_record(
        self, session: Session, call: ChatCall, started_at: float, t0: float
    ) -> Reply:
        prepared = await self.prepare_async(session, call)
        prep_ms = (time.perf_counter() - t0) * 1e3
        forced = await self._teacher_reply(session, prepared) if session.teacher else None
        # a bounded engine serves training's waiting calls before evaluation's (``priority``)
        async with self.engine_slots.slot(priority_of(session.run_id)):
            reply, images = await generate_storing_images(
                self.engine, self.blobs, session, prepared, forced, self.retract
            )
        if reply.finish_reason == "abort":
            raise Refusal(reply.abort_status or 503, reply.abort_message, code="engine_abort")
        t1 = time.perf_counter()
        event = record_of(
            session, prepared, reply, images, started_at, prep_ms + (time.perf_counter() - t1) * 1e3
        )
        # a session deleted while this call was in flight still gets its record published
        lock = self.table.locks.get(session.session_id) or anyio.Lock()
        await publish_and_commit(self.sink, lock, self.metrics, session, prepared, reply, event)
        body = completion_body(
            call_id=prepared.call_id,
            model=call.model,
            text=reply.text,
            finish_reason=reply.finish_reason,
            prompt_tokens=len(prepared.prompt_ids),
            completion_tokens=len(reply.output_ids),
        )
        if call.stream:
            return Reply(200, raw=stream_body(body), media_type="text/event-stream")
        return Reply(200, body)

    async def _teacher_reply(self, session: Session, prepared: Prepared) -> Forced:
        """The teacher's reply text and its ids as the policy's completion (the reply, then the
        end-of-turn token the policy would stop on)."""
        assert self.teacher is not None and session.teacher is not None
        text = await self.teacher.reply(session.teacher, prepared.call.sent_messages)
        ids = [*self.renderer.encode(text), self.renderer.im_end_id]
        if len(ids) > prepared.call.sampling["max_new_tokens"]:
            raise Refusal(
                400,
                f"the teacher's reply is {len(ids)} tokens, over this call's cap of "
                f"{prepared.call.sampling['max_new_tokens']}",
                code="teacher_reply_too_long",
            )
        return Forced(text, ids)
