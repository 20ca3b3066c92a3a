"""First screens drawn for layouts nobody played: a recorded screenshot of a task page with its page
area repainted for another layout of the same task. A task whose page is flat fills on a flat background
(``DRAWABLE_TASKS``) redraws exactly but for the screenshot's compression, so one recorded first screen
yields as many demonstrations of where to click as there are layouts (issue O: the policy learns to
localise from ~1,000 screens, and recording an episode costs seconds of a desktop). Pure: pixels in,
pixels and the click out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cua_stream.binding.coordinates import GRID_MAX
from cua_stream.tasks.blind import target_box
from cua_stream.tasks.pages import BANNER_H, BOX_JITTER_X, BOX_JITTER_Y, PAGE_H, PAGE_W, Layout
from cua_stream.tasks.policies import find_color

DRAWABLE_TASKS = ("click-box",)
"""Tasks whose page is boxes of flat colour without text (click-button's labels would need the
browser's font)."""

PAGE_BACKGROUND = (245, 245, 245)
"""The task page's background as the desktop's Chromium shows it (measured on its screenshots; the page
asks for #f4f4f4)."""


@dataclass(frozen=True)
class Redrawn:
    pixels: np.ndarray
    """The new screen (H x W x RGB, the recorded one's size)."""
    target: tuple[int, int, int, int]
    """The new layout's target box on that screen, in screen pixels (x, y, w, h)."""
    click: tuple[int, int]
    """The target's centre in computer-1's 0..999 grid: what the oracle would click."""


def page_origin(pixels: np.ndarray, seen: Layout) -> tuple[int, int] | None:
    """Where ``seen``'s page (its top left) sits on a screenshot of it, found by its target's colour as
    the oracle finds it (the top panel is on some first screens and not others); None: not on screen."""
    x, y, w, h = target_box(seen)
    where = find_color(pixels, seen.element("target").color, aspect=w / h)
    if where is None:
        return None
    sh, sw = pixels.shape[:2]
    cx, cy = where[0] / GRID_MAX * (sw - 1), where[1] / GRID_MAX * (sh - 1)
    # the patch's centre is its pixels' mean, (w - 1) / 2 past its first; the grid is 0.8 px a unit at most
    # here, so the rounding lands on the pixel
    return round(cx - (w - 1) / 2) - x, round(cy - (h - 1) / 2) - y


def redraw(pixels: np.ndarray, seen: Layout, new: Layout) -> Redrawn | None:
    """The screen ``pixels`` (a first screen of ``seen``) showing ``new`` instead: the page area
    repainted with its background and ``new``'s boxes painted where ``seen``'s page is. None when
    ``seen``'s target is not on the screen (the page not loaded yet)."""
    if seen.task != new.task or new.task not in DRAWABLE_TASKS:
        raise ValueError(
            f"redraw draws {', '.join(DRAWABLE_TASKS)} over itself, not {seen.task} as {new.task}"
        )
    origin = page_origin(pixels, seen)
    if origin is None:
        return None
    ox, oy = origin
    out = np.array(pixels[..., :3], dtype=np.uint8, copy=True)
    _fill(out, ox, oy + BANNER_H, PAGE_W + BOX_JITTER_X, PAGE_H + BOX_JITTER_Y, PAGE_BACKGROUND)
    for e in new.elements:
        _fill(out, ox + e.x, oy + e.y, e.w, e.h, e.color)
    x, y, w, h = target_box(new)
    box = (ox + x, oy + y, w, h)
    sh, sw = out.shape[:2]
    cx, cy = box[0] + (w - 1) / 2, box[1] + (h - 1) / 2
    click = round(cx / (sw - 1) * GRID_MAX), round(cy / (sh - 1) * GRID_MAX)
    return Redrawn(out, box, click)


def _fill(pixels: np.ndarray, x: int, y: int, w: int, h: int, color: tuple[int, int, int]) -> None:
    """Paints [x, x + w) by [y, y + h), clipped to the screen."""
    sh, sw = pixels.shape[:2]
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, sw), min(y + h, sh)
    if x0 < x1 and y0 < y1:
        pixels[y0:y1, x0:x1] = color
