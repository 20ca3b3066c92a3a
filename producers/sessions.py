"""The producer's side of the session gateway: open a session per episode, close it for its counts."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from cua_stream.bus.connect import backoff_s
from cua_stream.config import Secret
from cua_stream.events import WorkRequest
from cua_stream.identity import layout_seed
from producers.http_pool import ClientPool

log = logging.getLogger(__name__)

OPEN_RETRIES = 5


@dataclass(frozen=True)
class OpenSession:
    session_id: str
    episode_id: str
    url: str
    """The OpenAI-compatible base URL the agent talks to."""
    key: Secret
    context_length: int


class GatewaySessions:
    def __init__(self, http: ClientPool, gateway_url: str, api_key: Secret | None) -> None:
        self.http = http
        self.gateway_url = gateway_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key.reveal()}"} if api_key else {}

    async def open(self, work: WorkRequest, attempt: int) -> OpenSession:
        """A session for this attempt of ``work`` (retried while the gateway is down or busy)."""
        sampling = {"temperature": 1.0, **work.sampling}
        body = {
            "run_id": work.run_id,
            "group_id": work.group_id,
            "episode_id": work.episode_id,
            "attempt": attempt,
            "sampling": sampling,
        }
        if work.teacher:  # a demonstration: the teacher's policy for this task instance
            body["teacher"] = f"{work.teacher}/{work.task.name}/{layout_seed(work)}"
        for n in range(1, OPEN_RETRIES + 1):
            try:
                http = self.http.client(work.episode_id)
                r = await http.post(f"{self.gateway_url}/sessions", json=body, headers=self._headers)
                if r.status_code != 503 or n == OPEN_RETRIES:
                    r.raise_for_status()
                    got = r.json()
                    return OpenSession(
                        session_id=got["session_id"],
                        episode_id=work.episode_id,
                        url=self.gateway_url + got["base_url"],
                        key=Secret(got.get("session_key") or "no-key"),
                        context_length=int(got.get("context_length") or 32768),
                    )
            except httpx.TransportError as e:
                if n == OPEN_RETRIES:
                    raise
                log.warning("gateway unreachable (%s); retrying", type(e).__name__)
            await anyio.sleep(backoff_s(n))
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self, session: OpenSession) -> dict[str, Any]:
        """Close the session; its report (calls, turns, statuses). Empty if the gateway lost it."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            # twice: after a long episode the pooled connection may be one the server has since closed
            for attempt in (1, 2):
                try:
                    r = await self.http.client(session.episode_id).delete(
                        f"{self.gateway_url}/sessions/{session.session_id}", headers=self._headers
                    )
                    if r.status_code == 200:
                        report = r.json()
                        return report if isinstance(report, dict) else {}
                    log.warning("closing session %s: gateway answered %d", session.session_id, r.status_code)
                    break
                except (httpx.TransportError, ValueError) as e:
                    if attempt == 2:
                        log.warning("closing session %s: %s", session.session_id, e)
        return {}
