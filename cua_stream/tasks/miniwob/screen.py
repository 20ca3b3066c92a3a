"""Where a MiniWoB++ page's points are on the screenshot an agent sees, found on the screenshot itself. Pure.

The wrapper page shows the task's frame at ``ZOOM`` (docs/miniwob.md, geometry), and where the frame is on
the screen depends on the browser (its tab strip and toolbar, the desktop's panel while it is on
screen): so it is found, not assumed. The frame's top is the task's yellow banner (``#query``, #ff0) on
the page's #f4f4f4: its top-left corner, placed to a fraction of a pixel, is the frame's. A task-page
point (x, y) is then at desktop pixel (left + ZOOM x, top + ZOOM y), and computer-1's 0..999 grid
addresses it (Harbor maps the grid back to the desktop's pixels; the screenshot is the desktop resized,
which the grid does not see).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cua_stream.binding.coordinates import GRID_MAX
from cua_stream.tasks.miniwob.wrapper import ZOOM

BACKGROUND_BLUE = 0xF4
"""The wrapper page's #f4f4f4 around the frame: its blue channel (the banner's, #ff0, is 0)."""
EDGE = 3
"""Pixels on either side of an edge weighed to place it."""
MIN_BANNER = 20
"""Screenshot pixels of yellow a row needs to be taken for the banner's."""
DISPLAY = re.compile(r"The display is (\d+)x(\d+) pixels")
"""computer-1's prompt names the desktop's size."""


@dataclass(frozen=True)
class Frame:
    """Where the task's frame is on the desktop (pixels): its top-left corner and width."""

    left: int
    top: int
    width: int

    def pixel(self, x: float, y: float) -> tuple[int, int]:
        """The desktop pixel showing task-page point (x, y)."""
        return round(self.left + ZOOM * x), round(self.top + ZOOM * y)


def frame_on(pixels: np.ndarray, desktop: tuple[int, int]) -> Frame | None:
    """The task frame on a screenshot (``pixels``, RGB, the desktop resized to the model's grid, e.g.
    800x600 as 800x608), in desktop pixels; None when no banner is on it. Each edge is placed to a
    fraction of a pixel by how yellow the pixels across it are (the resize blends the banner's edge with
    the page around it), then to the desktop's whole pixel."""
    rgb = pixels[..., :3].astype(np.float64)
    yellow = (rgb[..., :2] > 200).all(-1)
    yellowness = np.clip((BACKGROUND_BLUE - rgb[..., 2]) / BACKGROUND_BLUE, 0, 1) * yellow
    rows = (yellowness > 0.5).sum(axis=1)
    if rows.max(initial=0) < MIN_BANNER:
        return None
    top = int(np.flatnonzero(rows >= rows.max() * 0.9)[0])
    cols = np.flatnonzero(yellowness[top + 2] > 0.5)
    if len(cols) < MIN_BANNER:
        return None
    left, right = int(cols[0]), int(cols[-1])
    if top < EDGE or left < EDGE or right - left < 2 * EDGE + 20:
        return None
    # a step from 0 to 1 across an edge integrates to the distance from the edge to the window's end
    down = yellowness[top - EDGE : top + EDGE, left + 10 : right - 10].mean(axis=1).sum()
    across = yellowness[top + 1 : top + 4, left - EDGE : left + EDGE].mean(axis=0).sum()
    h, w = pixels.shape[:2]
    sx, sy = desktop[0] / w, desktop[1] / h
    # the frame sits on whole pixels (the wrapper centres it at whole CSS pixels, at zoom 1 on the screen):
    # the measurement, good to a fraction, snaps to them
    return Frame(
        round((left + EDGE - across) * sx), round((top + EDGE - down) * sy), round((right + 1 - left) * sx)
    )


def to_grid(x: float, y: float, desktop: tuple[int, int]) -> tuple[int, int]:
    """Desktop pixel (x, y) on computer-1's 0..999 grid (Harbor maps it back exactly: 999 > a side)."""
    return round(x * GRID_MAX / (desktop[0] - 1)), round(y * GRID_MAX / (desktop[1] - 1))


def desktop_size(messages: Sequence[dict[str, Any]], screenshot: tuple[int, int]) -> tuple[int, int]:
    """The desktop's size as computer-1's prompt states it; the screenshot's (width, height) if no
    message does (the screenshot is then taken as the desktop itself)."""
    for message in messages:
        content = message.get("content")
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else part
            if isinstance(text, str) and (found := DISPLAY.search(text)):
                return int(found.group(1)), int(found.group(2))
    return screenshot
