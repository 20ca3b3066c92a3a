"""One episode's session: identity, training sampling defaults, the call tree, and what it answered.

Pure state; the service serialises commits per session. ``seq`` is allocated only when a record is
published, so the published records of an episode are gap-free even when a call fails.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cua_stream.auth import new_session_key
from cua_stream.engine.params import SamplingParams
from cua_stream.errors import SamplingError
from cua_stream.events import CallKind
from cua_stream.gateway.calltree import CallNode, CallTree
from cua_stream.gateway.refusal import bad_request
from cua_stream.gateway.request_prefix import KnownRequest
from cua_stream.gateway.teacher import TEACHER_NAME
from cua_stream.identity import identity_problem


class SessionSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /sessions``."""

    run_id: str
    group_id: str
    episode_id: str
    sampling: dict[str, Any]
    """Training sampling parameters (SGLang names): ``temperature`` is required; ``top_p``, ``top_k``,
    ``min_p``, ``max_new_tokens``, ``stop``, ``stop_token_ids`` fill what a request omits."""
    session_id: str | None = None
    """Optional client-chosen id (URL-safe); a random one otherwise."""
    attempt: int = 0
    """The episode's attempt (the producer's count of runs of its work request); stamped on every record."""
    teacher: str | None = None
    """Record forced completions from this teacher (a path under the gateway's ``teacher_url``, e.g.
    ``oracle/click-button/7``) instead of sampling: demonstrations through the training path."""

    def __post_init__(self) -> None:
        # ValueError becomes msgspec.ValidationError, which the app answers with 400.
        if problem := identity_problem(self.run_id, self.group_id, self.episode_id):
            raise ValueError(problem)
        temperature = self.sampling.get("temperature")
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature < 0:
            raise ValueError("sampling.temperature: the training temperature is required (a number >= 0)")
        unknown = set(self.sampling) - TRAINING_SAMPLING_FIELDS
        if unknown:
            raise ValueError(f"sampling: unknown fields {sorted(unknown)}")
        # The engine's own rules, so a session never holds sampling every call of it would be refused for.
        try:
            params = SamplingParams.from_request(self.sampling)
        except SamplingError as e:
            raise ValueError(str(e).replace("sampling_params.", "sampling.")) from None
        if "max_new_tokens" in self.sampling and params.max_new_tokens < 1:
            raise ValueError("sampling.max_new_tokens: must be >= 1 (0 would record empty completions)")
        if self.attempt < 0:
            raise ValueError("attempt: must be >= 0")
        if self.teacher is not None and not TEACHER_NAME.fullmatch(self.teacher):
            raise ValueError("teacher: a path of up to 8 URL-safe segments (letters, digits, '-', '_', '.')")
        if self.session_id is not None and not _SESSION_ID.fullmatch(self.session_id):
            raise ValueError(
                "session_id: 1-128 letters, digits, '-', '_' or '.', starting with a letter, digit, "
                "'-' or '_' (so never '.' or '..')"
            )


TRAINING_SAMPLING_FIELDS = frozenset(
    {"temperature", "top_p", "top_k", "min_p", "max_new_tokens", "stop", "stop_token_ids"}
)
_SESSION_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
"""URL-path safe, and never a dot segment (``.``/``..`` are normalised away by clients and proxies)."""


@dataclass(eq=False)
class Session:
    session_id: str
    run_id: str
    group_id: str
    episode_id: str
    sampling: dict[str, Any]
    created_at: float
    attempt: int = 0
    teacher: str | None = None
    tree: CallTree = field(default_factory=CallTree)
    next_seq: int = 0
    statuses: list[int] = field(default_factory=list)
    """Every non-2xx status this session answered, in order (the producer puts them in the outcome)."""
    calls_without_kind: int = 0
    """Recorded calls whose request carried no ``cua_call_kind`` (recorded as agent turns)."""
    kinds: Counter[str] = field(default_factory=Counter)
    known_request: KnownRequest | None = None
    """The last request read, with its bytes: the next one is read past the messages they share."""
    last_active: float = field(default_factory=time.monotonic)
    """When a call last started or ended (monotonic): idle expiry counts from here."""
    in_flight: int = 0
    """Calls of this session being served (a session with a call in flight is never idle)."""
    key: str = field(default_factory=new_session_key, repr=False)
    """The session's own credential: its chat route accepts it in place of the gateway's API key, so the
    agent (and its sandbox) holds a key that opens this one session and dies with it."""

    @classmethod
    def create(cls, spec: SessionSpec, now: float) -> Session:
        return cls(
            session_id=spec.session_id or uuid.uuid4().hex,
            run_id=spec.run_id,
            group_id=spec.group_id,
            episode_id=spec.episode_id,
            sampling=dict(spec.sampling),
            created_at=now,
            attempt=spec.attempt,
            teacher=spec.teacher,
        )

    @property
    def temperature(self) -> float:
        return float(self.sampling["temperature"])

    def check_temperature(self, requested: Any) -> None:
        """400 naming both values when a request's temperature differs from the training temperature."""
        if requested is None:
            return
        if isinstance(requested, bool) or not isinstance(requested, (int, float)):
            raise bad_request(f"temperature={requested!r} is not a number")
        if not math.isclose(float(requested), self.temperature, rel_tol=0.0, abs_tol=1e-9):
            raise bad_request(
                f"temperature={requested} does not match the training session temperature={self.temperature}"
            )

    def record(self, node: CallNode, *, kind_given: bool) -> None:
        self.next_seq = node.seq + 1
        self.kinds[node.kind.value] += 1
        if not kind_given:
            self.calls_without_kind += 1

    def summary(self) -> dict[str, Any]:
        """What ``GET /sessions/{id}`` returns (besides the mismatch report)."""
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "group_id": self.group_id,
            "episode_id": self.episode_id,
            "attempt": self.attempt,
            "teacher": self.teacher,
            "sampling": self.sampling,
            "n_calls": len(self.tree),
            "n_turns": sum(n for k, n in self.kinds.items() if k in _TURN_KINDS),
            "n_summaries": sum(n for k, n in self.kinds.items() if k not in _TURN_KINDS),
            "statuses": list(self.statuses),
            "calls_without_kind": self.calls_without_kind,
            "calls": [
                {
                    "call_id": n.call_id,
                    "parent_call_id": n.parent.call_id if n.parent else None,
                    "seq": n.seq,
                    "kind": n.kind.value,
                    "finish_reason": n.finish_reason,
                    "prompt_tokens": len(n.prompt_ids),
                    "delta_prompt_tokens": len(n.prompt_ids) - n.delta_start,
                    "completion_tokens": len(n.completion_ids),
                }
                for n in sorted(self.tree, key=lambda n: n.seq)
            ],
        }


_TURN_KINDS = frozenset({CallKind.AGENT_TURN.value, CallKind.FINAL_ANSWER.value})
