"""An episode of a scripted policy (the policy server's oracle or do-nothing) on one task, as the producer
would run it, and what its trial directory says the policy did first."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cua_stream.config import Secret
from cua_stream.events import TaskRef, WorkRequest
from producers.episode import EpisodeRun


def scripted_episode(
    port: int,
    policy: str,
    task: str,
    seed: int,
    *,
    run_id: str,
    episode_id: str,
    task_path: Path | None = None,
) -> EpisodeRun:
    """Attempt 1 of ``episode_id``: ``policy`` acting on ``task`` (bundled, or the copy at ``task_path``)
    through the policy server on ``port``; the trial directory is ``<trials>/<episode_id>.1``."""
    work = WorkRequest(
        run_id=run_id,
        group_id=f"g-{episode_id}",
        episode_id=episode_id,
        task=TaskRef(name=task, path=str(task_path) if task_path else None),
        sample_index=0,
        group_size=1,
        policy_version=0,
        created_at=time.time(),
    )
    return EpisodeRun(
        work=work,
        attempt=1,
        seed=seed,
        session_url=f"http://127.0.0.1:{port}/policies/{policy}/{task}/{seed}/v1",
        session_key=Secret("scripted-policy-key"),
        context_length=32768,
    )


def first_action(trial: Path) -> str:
    """The type of the policy's first action (after computer-1's own start_url navigation)."""
    steps = json.loads((trial / "agent" / "trajectory.json").read_text())["steps"]
    calls = [c for s in steps if s["source"] == "agent" for c in s.get("tool_calls") or []]
    return next(c["arguments"]["type"] for c in calls if c["tool_call_id"] != "call_start_url_navigation")
