"""The bundled tasks' verdicts: what the page reported (and the final answer) → reward. Pure.

Only the first decisive act counts (the first click, the first submit, the first confirm), so a policy
that presses everything is not rewarded for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cua_stream.tasks.pages import ONE_CLICK_TASKS, Layout


def _first(events: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    return next((e for e in events if key in e), None)


def reward(lay: Layout, events: Sequence[Mapping[str, Any]], final_answer: str | None) -> float:
    """1.0 when the episode did what the banner asked, else 0.0."""
    if lay.task == "read-value":
        return float(final_answer is not None and final_answer.strip() == lay.answer)
    if lay.task in ONE_CLICK_TASKS:
        first = _first(events, "click")
        clicked = first is not None and first["click"] == lay.answer
        # click-test and click-box must also finish: a right click followed by garbage is not a solved
        # episode (GRPO would reinforce the garbage)
        finished = lay.task == "click-button" or (final_answer is not None and final_answer.strip() == "done")
        return float(clicked and finished)
    if lay.task == "follow-link":
        first = _first(events, "confirm")
        return float(first is not None and first["confirm"] == lay.answer)
    first = _first(events, "submit")
    if first is None or str(first["submit"]).strip() != lay.answer:
        return 0.0
    return float(lay.task != "sign-up" or first.get("agreed") is True)
