"""The MiniWoB++ teacher: a privileged scripted policy for demonstrations, served as the ``oracle`` of the
``miniwob/*`` tasks by ``cua-stream policies``.

It reads the task page's DOM, which the policy being trained never sees, on a shadow page of its own
(``shadow``: the episode's wrapper page at the episode's seed, so the same problem), decides each move with
the task's solver (``solvers``: pure, from the page and the moves made), and acts on the episode only
through computer-1's actions: a click lands where the screenshot it was sent shows the task's frame
(``screen``), at the desktop size computer-1's prompt states. Each request carries the conversation, so
the teacher's earlier replies say how many moves it has made; its shadow replays that many (each decided
again the same way) to be where the episode is. Once the page has ended (or the solver has nothing left
to do) it answers ``done``, which computer-1 asks to confirm.

``rehearse`` plays a solver on a shadow page alone, to the page's own reward, without a desktop: what the
blind baseline and the tests use to know a solver's moves before any episode runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cua_stream.devtools import Browser
from cua_stream.tasks.miniwob import PREFIX
from cua_stream.tasks.miniwob.moves import Move
from cua_stream.tasks.miniwob.screen import Frame, desktop_size, frame_on, to_grid
from cua_stream.tasks.miniwob.shadow import Shadow, Shadows
from cua_stream.tasks.miniwob.solvers import SOLVERS, History
from cua_stream.tasks.policies import progress

MAX_MOVES = 30
"""Moves an episode gets at most (a solver that loops stops there)."""
DONE: dict[str, Any] = {"type": "done", "result": "done"}
WAIT: dict[str, Any] = {"type": "wait", "duration": 1}


def teaches(task: str) -> bool:
    """Whether the teacher plays ``task`` (``miniwob/<name>``)."""
    return task.startswith(PREFIX) and task.removeprefix(PREFIX) in SOLVERS


def action_of(move: Move, frame: Frame | None, desktop: tuple[int, int]) -> dict[str, Any]:
    """``move`` as computer-1's action on the desktop, its points placed by ``frame`` (a wait when a
    point is needed and no frame was found: the page is not on screen yet). Pure."""
    if move.kind == "type":
        return {"type": "type", "text": move.text}
    if move.kind == "keys":
        return {"type": "keypress", "keys": list(move.keys)}
    if frame is None:
        return WAIT
    x, y = to_grid(*frame.pixel(move.x, move.y), desktop)
    if move.kind == "click":
        return {"type": "click", "x": x, "y": y}
    if move.kind == "hover":
        return {"type": "mouse_move", "x": x, "y": y}
    end_x, end_y = to_grid(*frame.pixel(move.end_x, move.end_y), desktop)
    return {"type": "drag", "x": x, "y": y, "end_x": end_x, "end_y": end_y}


async def teacher_action(
    shadows: Shadows,
    task: str,
    seed: int,
    replies: Sequence[str],
    messages: Sequence[dict[str, Any]],
    pixels: np.ndarray | None,
) -> dict[str, Any]:
    """The teacher's next action in an episode of ``task`` (one it ``teaches``) at layout ``seed``."""
    name = task.removeprefix(PREFIX)
    solver = SOLVERS[name]
    made = progress(replies)
    snap, history = await shadows.state(name, seed, made, solver)
    # the page ended, or the solver stopped before the conversation's moves (then it said done)
    if snap.ended or len(history) < made or made >= MAX_MOVES:
        return DONE
    if (move := solver.solve(snap, history)) is None:
        return DONE
    if pixels is None:
        return WAIT
    desktop = desktop_size(messages, (pixels.shape[1], pixels.shape[0]))
    return action_of(move, frame_on(pixels, desktop), desktop)


@dataclass(frozen=True)
class Rehearsal:
    """A solver played on a shadow page alone: the page's raw reward (None: it never ended) and the
    moves made."""

    raw: float | None
    moves: History


async def rehearse(browser: Browser, name: str, seed: int) -> Rehearsal:
    """``name``'s solver played at ``seed`` on a fresh shadow page, to the page's end or the solver's."""
    shadow = await Shadow.open(browser, name, seed)
    try:
        snap = await shadow.play(SOLVERS[name], MAX_MOVES)
        return Rehearsal(snap.raw, tuple(shadow.history))
    finally:
        await shadow.close()
