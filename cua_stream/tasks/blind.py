"""What a policy that ignores the screen can reach on a bundled task: the best fixed click. Pure.

A blind policy replies the same whatever it sees. On the tasks one click decides (``click-test``,
``click-button`` and ``click-box``: the verdict reads the first click on a button, and the ``done``
click-test and click-box also ask for is a reply a blind policy can make too) its best is the page
point that lands on the target in the most layouts, and that point's hit rate over the task's layouts is
the *blind baseline*: what a policy without eyes gets, so a learned policy at or under it has shown no
use of the screen. The point is chosen on the layouts it is measured on, so on new layouts it does a
little worse (a ceiling, not an estimate).

The other tasks need text typed from the banner, a value read off the page or clicks in a row on
elements that move: no single click solves them, and they have no blind baseline here (None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from cua_stream.tasks.pages import ONE_CLICK_TASKS, Layout, layout


@dataclass(frozen=True)
class FixedClick:
    """The best fixed click on ``task`` over ``layouts`` layouts: the page pixel (``x``, ``y``; the
    first in reading order among equals) and on how many layouts it hits the target."""

    task: str
    x: int
    y: int
    hits: int
    layouts: int


def target_box(lay: Layout) -> tuple[int, int, int, int]:
    """The target element's box (x, y, width, height in page pixels) of a one-click task's layout."""
    (target,) = [e for e in lay.elements if e.label == lay.answer]
    return target.x, target.y, target.w, target.h


def best_fixed_click(task: str, seeds: Sequence[int]) -> FixedClick | None:
    """The page point that hits ``task``'s target on the most of ``seeds``' layouts (None: no single
    click solves ``task``, or no seeds). Every pixel is counted: a 2-D difference array of the targets'
    boxes, summed up (a box covers [x, x + w) by [y, y + h), as the page's hit test does)."""
    if task not in ONE_CLICK_TASKS or not seeds:
        return None
    boxes = [target_box(layout(task, seed)) for seed in seeds]
    width = max(x + w for x, _, w, _ in boxes) + 1
    height = max(y + h for _, y, _, h in boxes) + 1
    diff = [[0] * width for _ in range(height)]
    for x, y, w, h in boxes:
        diff[y][x] += 1
        diff[y][x + w] -= 1
        diff[y + h][x] -= 1
        diff[y + h][x + w] += 1
    best = FixedClick(task, 0, 0, -1, len(boxes))
    column = [0] * width  # the running sum down each column of the row-wise prefix sums
    for y, row in enumerate(diff):
        column = [c + r for c, r in zip(column, accumulate(row), strict=True)]
        top = max(column)
        if top > best.hits:
            best = FixedClick(task, column.index(top), y, top, len(boxes))
    return best
