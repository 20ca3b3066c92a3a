"""Scripted policies for the bundled tasks: the oracle, which solves a task from its seed, and the
do-nothing policy, which proves a task is not solved by doing nothing, and the idle policy, which keeps
an episode going. Pure decision logic.

The oracle knows the goal and the colors of the elements from the seed's layout, and finds each element
on the latest screenshot by its color (so it acts on what the desktop shows: coordinates go through the
same 0..999 grid, resize and xdotool path as a model's). Its replies are computer-1 JSON; a task ends
with the confirmation round trip computer-1 asks for (the terminal action twice).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cua_stream.binding.coordinates import GRID_MAX
from cua_stream.tasks.pages import ONE_CLICK_TASKS, Layout

COLOR_TOLERANCE = 40
"""Per channel: screenshots are lossy WebP."""
MIN_PIXELS = 40
ASPECT_SLACK = 1.6
"""How far a patch's width / height may be from its element's (edges of lossy screenshots, resizes)."""


@dataclass(frozen=True)
class Step:
    type: str
    """click | type | answer | done"""
    target: str = ""
    """The element to click (``page:id``, page empty for the main page); the text to type or answer."""


def oracle_plan(lay: Layout) -> tuple[Step, ...]:
    """The steps that solve ``lay``, terminal confirmation included."""
    click = lambda id, page="": Step("click", f"{page}:{id}")  # noqa: E731
    done = (Step("done"), Step("done"))
    if lay.task in ONE_CLICK_TASKS:
        target = next(e for e in lay.elements if e.label == lay.answer)
        return (click(target.id), *done)
    if lay.task == "fill-form":
        return (click("input"), Step("type", lay.answer), click("submit"), *done)
    if lay.task == "read-value":
        return (Step("answer", lay.answer), Step("answer", lay.answer))
    if lay.task == "follow-link":
        link = next(e for e in lay.elements if e.label == lay.answer)
        return (click(link.id), click("confirm", lay.answer), *done)
    if lay.task == "choose-option":
        option = next(e for e in lay.elements if e.label == lay.answer)
        return (click("menu"), click(option.id), click("submit"), *done)
    return (click("input"), Step("type", lay.answer), click("agree"), click("submit"), *done)


def find_color(
    pixels: np.ndarray, color: tuple[int, int, int], aspect: float | None = None
) -> tuple[int, int] | None:
    """The 0..999 grid position of the centre of ``color``'s largest patch on an RGB screenshot, or None.

    With ``aspect`` (the element's width / height), a patch whose shape is not the element's is not it:
    before the page has loaded, a desktop icon of a similar color is on screen (a dock icon once took a
    teal menu's click, and the episode waited for its options to its turn limit)."""
    diff = np.abs(pixels[..., :3].astype(np.int16) - np.array(color, dtype=np.int16))
    hit = (diff <= COLOR_TOLERANCE).all(axis=-1)
    rows = _largest_run(hit.sum(axis=1))
    cols = _largest_run(hit[rows].sum(axis=0))
    ys, xs = np.nonzero(hit[rows, cols])
    if len(xs) < MIN_PIXELS:
        return None
    shape = (cols.stop - cols.start) / (rows.stop - rows.start)
    if aspect is not None and not 1 / ASPECT_SLACK <= shape / aspect <= ASPECT_SLACK:
        return None
    h, w = pixels.shape[:2]
    x, y = cols.start + float(xs.mean()), rows.start + float(ys.mean())
    return round(x / max(w - 1, 1) * GRID_MAX), round(y / max(h - 1, 1) * GRID_MAX)


def _largest_run(counts: np.ndarray) -> slice:
    """The run of consecutive non-zero entries of ``counts`` with the largest sum (all of it if none)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], (counts > 0).astype(np.int8), [0]))))
    runs = [slice(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]
    return max(runs, key=lambda r: int(counts[r].sum()), default=slice(0, len(counts)))


def reply_action(reply: str) -> dict[str, Any] | None:
    """The action a computer-1 reply carries (a JSON object whose ``action`` names a ``type``), or None."""
    try:
        action = json.loads(reply).get("action")
    except (ValueError, AttributeError):
        return None
    return action if isinstance(action, dict) and isinstance(action.get("type"), str) else None


def progress(replies: Sequence[str]) -> int:
    """How many plan steps the conversation's earlier replies carried out (``wait`` replies do not count)."""
    return sum((action := reply_action(reply)) is not None and action["type"] != "wait" for reply in replies)


def oracle_action(lay: Layout, replies: Sequence[str], pixels: np.ndarray | None) -> dict[str, Any]:
    """The oracle's next action, given its earlier replies and the latest screenshot."""
    plan = oracle_plan(lay)
    step = plan[min(progress(replies), len(plan) - 1)]
    if step.type == "done":
        return {"type": "done", "result": "done"}
    if step.type == "answer":
        return {"type": "answer", "result": step.target, "text": step.target}
    if step.type == "type":
        return {"type": "type", "text": step.target}
    page, _, id = step.target.partition(":")
    element = lay.element(id, page)
    where = find_color(pixels, element.color, element.w / element.h) if pixels is not None else None
    if where is None:  # not on screen yet (the page is still loading): look again
        return {"type": "wait", "duration": 1}
    return {"type": "click", "x": where[0], "y": where[1]}


def do_nothing_action(replies: Sequence[str]) -> dict[str, Any]:
    """Declares the task done at once (and confirms): what a policy that does nothing earns."""
    return {"type": "done", "result": "done"}


def idle_action(replies: Sequence[str]) -> dict[str, Any]:
    """Moves the mouse, turn after turn: an episode that runs until its turn limit and touches the X server
    every turn (a move and a fresh screenshot; computer-1 does not capture again after a ``wait``), for
    tests that break the desktop mid-episode."""
    return {"type": "mouse_move", "x": 300 + 100 * (len(replies) % 4), "y": 500}


def reply_text(action: dict[str, Any]) -> str:
    """A computer-1 JSON reply carrying ``action``."""
    return json.dumps({"analysis": "scripted policy", "plan": action["type"], "action": action})


def random_action(task: str, seed: int, replies: Sequence[str]) -> dict[str, Any]:
    """A click at a uniformly random point of the screen (the 0..999 grid), turn after turn until the turn
    limit: what chance earns. Seeded by the episode's task, layout seed and turn, so a run repeats."""
    rng = random.Random(f"{task}:{seed}:{len(replies)}")
    return {"type": "click", "x": rng.randint(0, GRID_MAX), "y": rng.randint(0, GRID_MAX)}
