"""``max_parse_errors`` on the wire (real Harbor 0.26.0, real HTTP): an episode whose replies stop parsing
ends at the n-th consecutive one instead of asking again until its turn limit; a reply that parses
resets the count; unset, computer-1 asks again until the limit."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from cua_stream.binding.computer1 import Computer1Params, ServedModel, bind_computer1
from cua_stream.config import Secret
from tests.contract.computer1_harness import (
    CLICK_CENTRE,
    RecordingSandbox,
    Request,
    SessionServer,
    completion,
)
from tests.contract.test_computer1_episodes import run_episode

pytestmark = pytest.mark.harbor

TURNS = 5
SERVED = ServedModel(name="qwen3-vl-parse-errors", max_input_tokens=32768, max_output_tokens=512)


def replies(script: list[str]) -> Any:
    """Agent turns answered from ``script`` in a cycle; the other call sites answered."""
    turns = itertools.count()

    def reply(request: Request) -> tuple[int, dict[str, Any]]:
        if request.site != "agent_turn":
            return 200, completion("No answer found.")
        return 200, completion(script[next(turns) % len(script)])

    return reply


GARBAGE = 'analysis": 3 "x": 4 }}'
CLICK = json.dumps(CLICK_CENTRE)


@pytest.mark.parametrize(
    ("limit", "script", "turns", "reason"),
    [
        (2, [GARBAGE], 2, "parse_error_limit"),
        (None, [GARBAGE], TURNS, "max_turns_reached"),
        (2, [GARBAGE, CLICK], TURNS, "max_turns_reached"),  # never two in a row
        (1, [CLICK, CLICK, GARBAGE], 3, "parse_error_limit"),
    ],
)
def test_an_episode_ends_at_its_nth_consecutive_unparsable_reply(
    limit: int | None, script: list[str], turns: int, reason: str, tmp_path: Path
) -> None:
    with SessionServer(replies(script)) as server:
        params = Computer1Params(
            session_url=server.url("/sessions/p/v1"),
            session_key=Secret("sk-session"),
            temperature=1.0,
            model=SERVED,
            max_turns=TURNS,
            max_parse_errors=limit,
        )
        config = bind_computer1(params, {}).trial_agent_config()
        agent = asyncio.run(asyncio.wait_for(run_episode(config, RecordingSandbox(1024, 900), tmp_path), 60))
        sites = [r.site for r in server.requests]
    assert sites.count("agent_turn") == turns, sites
    assert agent._early_termination_reason == reason  # type: ignore[attr-defined]
    trajectory = json.loads((tmp_path / "trajectory.json").read_text())
    assert len([s for s in trajectory["steps"] if s.get("source") == "agent"]) >= turns  # every reply kept
