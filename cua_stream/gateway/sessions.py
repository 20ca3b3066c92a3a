"""The gateway's sessions: one per episode, created, looked up, described, deleted, and expired when idle.

The table refuses what a session could never be served with (a completion cap over the gateway's, a
teacher the gateway has none of) and holds at most ``max_sessions`` (expiring idle ones first, else 503).
An expired session's id is remembered, bounded, with the reason, so a late call hears why it got 404.
Each session has a lock: a call's record is published and added to its tree under it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio

from cua_stream.gateway.metrics import GatewayMetrics
from cua_stream.gateway.mismatch import tree_report
from cua_stream.gateway.refusal import Refusal
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.session import Session, SessionSpec

log = logging.getLogger(__name__)

EXPIRED_REMEMBERED = 4096


class SessionTable:
    def __init__(
        self,
        *,
        renderer: Renderer,
        metrics: GatewayMetrics,
        max_new_tokens_cap: int,
        has_teacher: bool,
        idle_timeout_s: float,
        max_sessions: int,
        clock: Callable[[], float],
    ) -> None:
        self.renderer = renderer
        self.metrics = metrics
        self.max_new_tokens_cap = max_new_tokens_cap
        self.has_teacher = has_teacher
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self.clock = clock
        self.open: dict[str, Session] = {}
        self.expired: OrderedDict[str, str] = OrderedDict()
        """Recently expired session ids → why (bounded)."""
        self.locks: dict[str, anyio.Lock] = {}

    def create(self, spec: SessionSpec) -> Session:
        asked = spec.sampling.get("max_new_tokens")
        if asked is not None and asked > self.max_new_tokens_cap:
            raise Refusal(
                400,
                f"sampling.max_new_tokens={asked} is over the gateway's cap of {self.max_new_tokens_cap} "
                "(gateway.max_new_tokens_cap)",
            )
        if spec.teacher is not None and not self.has_teacher:
            raise Refusal(
                400, "this session asks for a teacher, but the gateway has none (gateway.teacher_url)"
            )
        session = Session.create(spec, time.time())
        session.last_active = self.clock()
        if session.session_id in self.open:
            raise Refusal(409, f"session {session.session_id} already exists", code="session_exists")
        if len(self.open) >= self.max_sessions and not self.expire_idle():
            raise Refusal(
                503,
                f"the gateway holds {len(self.open)} open sessions (gateway.max_sessions); "
                "delete the sessions of finished episodes",
                code="too_many_sessions",
            )
        self.expired.pop(session.session_id, None)
        self.open[session.session_id] = session
        # fast_acquire: an uncontended lock (the usual case) costs no trip through the event loop.
        self.locks[session.session_id] = anyio.Lock(fast_acquire=True)
        return session

    def get(self, session_id: str) -> Session:
        try:
            return self.open[session_id]
        except KeyError:
            if session_id in self.expired:
                raise Refusal(
                    404, f"session {session_id} expired: {self.expired[session_id]}", code="session_expired"
                ) from None
            raise Refusal(404, f"unknown session {session_id}", code="session_not_found") from None

    def describe(self, session: Session) -> dict[str, Any]:
        return {**session.summary(), "tito_mismatch": self.mismatch_report(session)}

    def delete(self, session_id: str) -> dict[str, Any]:
        session = self.get(session_id)
        report = self.describe(session)
        for leaf_types in report["tito_mismatch"]["leaves"].values():
            for t in leaf_types or ["none"]:
                self.metrics.tito_mismatch.inc(type=t)
        del self.open[session_id]
        self.locks.pop(session_id, None)
        return report

    def mismatch_report(self, session: Session) -> dict[str, Any]:
        return tree_report(self.renderer, session.tree.leaves())

    def expire_idle(self) -> int:
        """Drop the sessions without a call for ``idle_timeout_s`` (none with a call in flight); their
        ids are remembered with the reason. Returns how many expired."""
        now = self.clock()
        idle = [
            s for s in self.open.values() if s.in_flight == 0 and now - s.last_active > self.idle_timeout_s
        ]
        for session in idle:
            del self.open[session.session_id]
            self.locks.pop(session.session_id, None)
            self.expired[session.session_id] = (
                f"idle for more than {self.idle_timeout_s:g} s (gateway.session_idle_timeout_s)"
            )
            while len(self.expired) > EXPIRED_REMEMBERED:
                self.expired.popitem(last=False)
            self.metrics.sessions_expired.inc(reason="idle")
            log.info("session %s of episode %s expired (idle)", session.session_id, session.episode_id)
        return len(idle)

    async def expire_idle_forever(self, every_s: float = 30.0) -> None:
        """The expiry sweep, run beside the server (a task of the app's lifespan)."""
        while True:
            await anyio.sleep(min(every_s, self.idle_timeout_s / 2))
            self.expire_idle()
