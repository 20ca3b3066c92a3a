"""The blind baseline of a MiniWoB++ task: the best fixed click, what a policy that ignores the screen can
reach (as ``cua_stream.tasks.blind`` is for the bundled tasks).

It is defined where one click solves the task: where the teacher's first move is a click that ends the
episode with success, on every layout it is chosen on. Then, on each of those layouts (``CHOICE_SEEDS``,
apart from the evaluation range), the shadow page says at which task pixels a click reaches the element
the teacher clicks (``Snapshot.hits``: the page's own hit testing, so covered parts do not count); the
point reached on the most layouts (the first in reading order among equals) is the fixed click. It is
then measured on the evaluation's layouts by clicking there on a shadow page (DevTools input at the
wrapper's geometry, as the teacher's rehearsal is) and reading the page's own reward. A fixed point of
the task page is a fixed point of the screen: the frame does not move within an episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cua_stream.devtools import Browser
from cua_stream.tasks.miniwob import PREFIX
from cua_stream.tasks.miniwob.dom import parse, snapshot_script
from cua_stream.tasks.miniwob.moves import click
from cua_stream.tasks.miniwob.shadow import Shadow
from cua_stream.tasks.miniwob.solvers import SOLVERS
from cua_stream.tasks.miniwob.verdict import DEFAULT_THRESHOLD

CHOICE_SEEDS = tuple(range(1, 51))
"""Layouts the fixed click is chosen on (training's range, below the evaluation's)."""


@dataclass(frozen=True)
class FixedClick:
    """The best fixed click on a task: the task-page pixel and on how many of ``layouts`` it hits."""

    task: str
    x: int
    y: int
    hits: int
    layouts: int


def best_point(maps: Sequence[np.ndarray]) -> tuple[int, int, int]:
    """The pixel (x, y) set in the most of ``maps`` (boolean, rows of pixels), the first in reading order
    among equals, and in how many. Pure."""
    counts = np.sum(maps, axis=0)
    flat = int(np.argmax(counts))  # the first maximum, row by row
    y, x = divmod(flat, counts.shape[1])
    return x, y, int(counts[y, x])


async def target_map(browser: Browser, name: str, seed: int) -> np.ndarray | None:
    """Where a click solves ``name`` at ``seed`` in one move: the pixels that reach the element the
    teacher clicks, when that click ends the episode with success; None when the teacher's first move
    is not such a click."""
    solver = SOLVERS[name]
    shadow = await Shadow.open(browser, name, seed)
    try:
        snap = await shadow.snapshot(solver.extra)
        move = solver.solve(snap, ())
        if move is None or move.kind != "click":
            return None
        reached = [e for e in snap if e.point == (move.x, move.y)]
        if not reached:
            return None
        raw = await shadow.tab.evaluate(snapshot_script(solver.extra, reached[-1].i))
        hits = parse(raw).hits if raw else None
        await shadow.apply(move)
        after = await shadow.snapshot(solver.extra)
        if not after.ended or after.raw is None or after.raw < DEFAULT_THRESHOLD or not hits:
            return None
        return np.array([[c == "1" for c in row] for row in hits], dtype=bool)
    finally:
        await shadow.close()


async def fixed_click(browser: Browser, name: str, seeds: Sequence[int] = CHOICE_SEEDS) -> FixedClick | None:
    """``name``'s best fixed click over ``seeds`` (None: no single click solves it on each of them)."""
    if name not in SOLVERS:
        return None
    maps = []
    for seed in seeds:
        found = await target_map(browser, name, seed)
        if found is None:
            return None
        maps.append(found)
    x, y, hits = best_point(maps)
    return FixedClick(PREFIX + name, x, y, hits, len(maps))


async def clicked_at(browser: Browser, name: str, seed: int, x: int, y: int) -> float | None:
    """The page's raw reward for one click at task pixel (x, y) (its centre) at ``seed`` (None: the page
    did not end)."""
    shadow = await Shadow.open(browser, name, seed)
    try:
        await shadow.apply(click((x + 0.5, y + 0.5)))
        return (await shadow.snapshot()).raw
    finally:
        await shadow.close()


@dataclass(frozen=True)
class Measured:
    """A fixed click measured: the page's raw reward on each layout (None: the page did not end)."""

    click: FixedClick
    raws: tuple[tuple[int, float | None], ...]


async def blind_baseline(browser: Browser, task: str, seeds: Sequence[int],
                         choice: Sequence[int] = CHOICE_SEEDS) -> Measured | None:  # fmt: skip
    """``task``'s (``miniwob/<name>``) best fixed click, chosen on ``choice`` and measured on ``seeds``;
    None where it has none."""
    name = task.removeprefix(PREFIX)
    best = await fixed_click(browser, name, choice)
    if best is None:
        return None
    raws = [(seed, await clicked_at(browser, name, seed, best.x, best.y)) for seed in seeds]
    return Measured(best, tuple(raws))
