"""The bundled tasks' verdicts: what the page reported (and the final answer) → reward. Pure.

Only the first decisive act counts (the first click, the first submit, the first confirm), so a policy
that presses everything is not rewarded for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cua_stream.tasks.pages import Layout


def _first(events: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    return next((e for e in events if key in e), None)


def reward(lay: Layout, events: Sequence[Mapping[str, Any]], final_answer: str | None) -> float:
    """1.0 when the episode did what the banner asked, else 0.0."""
    if lay.task == "read-value":
        return float(final_answer is not None and final_answer.strip() == lay.answer)
    if lay.task == "click-test":  # and then finish: the whole episode counts, not just its first act
        first = _first(events, "click")
        done = final_answer is not None and final_answer.strip() == "done"
        return float(first is not None and first["click"] == lay.answer and done)
    if lay.task == "click-button":
        first = _first(events, "click")
        return float(first is not None and first["click"] == lay.answer)
    if lay.task == "follow-link":
        first = _first(events, "confirm")
        return float(first is not None and first["confirm"] == lay.answer)
    first = _first(events, "submit")
    if first is None or str(first["submit"]).strip() != lay.answer:
        return 0.0
    return float(lay.task != "sign-up" or first.get("agreed") is True)
