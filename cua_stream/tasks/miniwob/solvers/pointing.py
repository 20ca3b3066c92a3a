"""Solvers of the tasks that need a place on the page, not an element's name: drags, sliders, and the
shape grids (``common/shapes.js``: letters, digits, circles, rectangles and triangles of a size and a
colour, described loosely by the banner). Pure."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from cua_stream.tasks.miniwob.dom import Element, Snapshot
from cua_stream.tasks.miniwob.moves import Move, drag
from cua_stream.tasks.miniwob.solvers.common import History, Solver, click_on, fill_form, first, submit_button

SHAPE_COLORS = ("red", "green", "blue", "aqua", "black", "magenta", "yellow")
"""``shapes.COLORS``."""
LARGE = 15
"""A shape drawn at 20 pixels is large, at 10 small (``shapes.renderGrid``): the boxes split at 15."""
SHAPE_TAGS = {"rect": "rectangle", "circle": "circle", "polygon": "triangle"}


def drag_box(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Drag the smaller box so that it is completely inside the larger box.': the small box
    dragged so that its corner is 15 pixels inside the large one's, then Submit."""
    small, large = snap.by_id("draggableSmall"), snap.by_id("draggableLarge")
    if small is None or large is None or small.point is None:
        return None
    dx, dy = small.box[0] - large.box[0], small.box[1] - large.box[1]
    if 0 < dx < large.box[2] - small.box[2] and 0 < dy < large.box[3] - small.box[3]:
        return click_on(submit_button(snap))
    start = small.point
    return drag(start, (start[0] + 15 - dx, start[1] + 15 - dy))


@dataclass(frozen=True)
class Track:
    """A jQuery UI slider: its track's box, its handle's centre and its options (min, max, value,
    orientation)."""

    box: tuple[float, float, float, float]
    handle: tuple[float, float]
    options: dict[str, Any]


def slider_drag(track: Track, want: int) -> Move | None:
    """A drag that sets ``track``'s slider to ``want``: pressed on the track off the handle (jQuery UI
    then takes the pointer's position as it is, with no offset into the handle), released on the whole
    task pixel whose value is ``want`` (a page's mouse events carry whole task pixels: the pointer aims
    at a pixel's centre). jQuery UI's ``_normValueFromMouse``, for a whole pixel along the track."""
    low, high = float(track.options["min"]), float(track.options["max"])
    across = track.options.get("orientation", "horizontal") == "horizontal"
    x, y, w, h = track.box
    start, size = (x, w) if across else (y, h)

    def value_at(px: int) -> int:
        f = min(1.0, max(0.0, (px - start) / size))
        return math.floor(low + (f if across else 1 - f) * (high - low) + 0.5)  # JavaScript's Math.round

    k = (want - low) / (high - low)
    exact = start + (k if across else 1 - k) * size
    hits = [px for px in range(math.floor(exact) - 3, math.ceil(exact) + 4) if value_at(px) == want]
    if not hits:
        return None
    best = min(hits, key=lambda px: abs(px - exact))
    mid = math.floor(y + h / 2 if across else x + w / 2) + 0.5
    to = (best + 0.5, mid) if across else (mid, best + 0.5)
    ends = ([(math.floor(x) + 1.5, mid), (math.ceil(x + w) - 1.5, mid)] if across
            else [(mid, math.floor(y) + 1.5), (mid, math.ceil(y + h) - 1.5)])  # fmt: skip
    press = max(ends, key=lambda p: abs(p[0] - track.handle[0]) + abs(p[1] - track.handle[1]))
    return drag(press, to)


def _track(snap: Snapshot, slider: Element | None, options: Any) -> Track | None:
    handle = first([e for e in snap.inside(slider) if "ui-slider-handle" in e.classes]) if slider else None
    if slider is None or handle is None or not isinstance(options, dict):
        return None
    return Track(slider.box, handle.centre, options)


def use_slider(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Select 37 with the slider and hit Submit.': the slider dragged to it, then Submit."""
    found = re.search(r"(-?\d+)", snap.utterance)
    track = _track(snap, snap.by_id("slider"), snap.extra)
    if not found or track is None:
        return None
    want = int(found.group(1))
    if track.options.get("value") == want:
        return click_on(submit_button(snap))
    if any(m.kind == "drag" for m in history):
        return None  # the drag missed: a second one would not do better
    return slider_drag(track, want)


def use_slider_2(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Set the sliders to the combination [3,11,6] and submit.': each slider dragged to its
    number, then Submit."""
    found = re.search(r"\[([-\d,\s]+)\]", snap.utterance)
    options = snap.extra if isinstance(snap.extra, list) else []
    if not found:
        return None
    wants = [int(n) for n in found.group(1).split(",")]
    for i, (want, option) in enumerate(zip(wants, options, strict=False), start=1):
        track = _track(snap, snap.by_id(f"slider-{i}"), option)
        if track is None:
            return None
        if track.options.get("value") != want:
            return slider_drag(track, want)
    return click_on(submit_button(snap))


@dataclass(frozen=True)
class Shape:
    """One shape of a ``shapes.js`` grid as drawn: ``text`` a letter, a digit or the shape's name."""

    element: Element
    kind: str
    """letter | digit | shape"""
    text: str
    color: str
    large: bool

    def matches(self, size: str, color: str, what: str) -> bool:
        """``shapes.shapeMatchesText``: a description's parts, each empty (any) or to match."""
        return ((not size or (size == "large") == self.large) and (not color or color == self.color)
                and (what == "item" or what in (self.text, self.kind)))  # fmt: skip


def drawn_shapes(snap: Snapshot) -> list[Shape]:
    found = []
    for e in snap:
        color = e.attrs.get("fill", "")
        if color not in SHAPE_COLORS:
            continue
        if e.tag == "text" and len(e.own) == 1:
            kind = "digit" if e.own.isdigit() else "letter"
            found.append(Shape(e, kind, e.own, color, e.box[3] > LARGE + 3))  # text boxes have line height
        elif e.tag in SHAPE_TAGS:
            found.append(Shape(e, "shape", SHAPE_TAGS[e.tag], color, max(e.box[2], e.box[3]) > LARGE))
    return found


def description(text: str) -> tuple[str, str, str] | None:
    """``shapes.generalDesc``'s text ('large red item', 'small 7', 'circle') as its parts: size, colour,
    and the shape's text or kind ('item': any)."""
    words = text.split()
    size = words.pop(0) if words and words[0] in ("large", "small") else ""
    color = words.pop(0) if words and words[0] in SHAPE_COLORS else ""
    return (size, color, words[0]) if len(words) == 1 else None


def click_shape(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Click on a large red item' / 'Click on a 7' / 'Click on a circle'."""
    found = re.match(r"Click on a (.*)$", snap.utterance)
    parts = description(found.group(1)) if found else None
    if parts is None:
        return None
    return click_on(first([s.element for s in drawn_shapes(snap) if s.matches(*parts)]))


def count_shape(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'How many small blue items are there?': the button showing the count."""
    found = re.match(r"How many (.*)s are there\?", snap.utterance)
    parts = description(found.group(1)) if found else None
    if parts is None:
        return None
    count = sum(s.matches(*parts) for s in drawn_shapes(snap))
    return click_on(first([e for e in snap if e.tag == "button" and e.own == str(count)]))


def visual_addition(snap: Snapshot, history: History) -> Move | None:
    """The blocks of the two groups counted and their sum typed, then Submit."""
    groups = [snap.by_id("visual-1"), snap.by_id("visual-2")]
    if any(g is None for g in groups):
        return None
    total = sum(sum("addition-block" in e.classes for e in snap.inside(g)) for g in groups if g)
    return fill_form(snap, history, [(snap.by_id("math-answer"), str(total))], submit_button(snap))


SOLVERS = {
    "drag-box": Solver(drag_box),
    "use-slider": Solver(use_slider, extra="$('#slider').slider('option')"),
    "use-slider-2": Solver(
        use_slider_2, extra="[1, 2, 3].map(function (i) { return $('#slider-' + i).slider('option'); })"
    ),
    "click-shape": Solver(click_shape),
    "count-shape": Solver(count_shape),
    "visual-addition": Solver(visual_addition),
}
