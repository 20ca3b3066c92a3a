"""What a producer hands an episode runner, and the runner contract.

The daemon opens the gateway session (its URL and per-episode key), numbers the attempt and picks the
layout seed; a runner plays the episode and returns its outcome; the daemon then closes the session and
adds the gateway's counts (calls, turns, statuses) to the outcome before publishing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cua_stream.config import Secret
from cua_stream.events import OutcomeEvent, WorkRequest


@dataclass(frozen=True, kw_only=True)
class EpisodeRun:
    work: WorkRequest
    attempt: int
    seed: int
    """The task layout's seed (``identity.layout_seed``)."""
    session_url: str
    """The gateway session's OpenAI-compatible base URL (ends in ``/v1``)."""
    session_key: Secret
    context_length: int
    """The gateway's context length (what compaction must stay under)."""


@dataclass(frozen=True)
class EpisodeResult:
    outcome: OutcomeEvent
    env_start_s: float | None = None
    """How long the environment took to come up (None: no environment, or it never started)."""


class EpisodeRunner(Protocol):
    async def run(self, episode: EpisodeRun) -> EpisodeResult:
        """Play ``episode`` to its end and describe it. Failures of the episode belong in the outcome;
        raising is for the runner's own bugs (the daemon then records the episode as failed)."""
        ...
