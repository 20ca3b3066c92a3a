"""What the solvers share: finding elements by their text, role or order, and the moves that click one,
fill a field, or fill a form and submit it. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cua_stream.tasks.miniwob.dom import Element, Snapshot
from cua_stream.tasks.miniwob.moves import Move, click, press, type_text

History = tuple[Move, ...]
"""The moves already made in this episode, oldest first."""
SolveFn = Callable[[Snapshot, History], Move | None]
"""A task's solver: the next move on the page as it is (None: nothing left to do, or no way to do it)."""


@dataclass(frozen=True)
class Solver:
    solve: SolveFn
    extra: str | None = None
    """A JavaScript expression read in the task's window beside the DOM (``Snapshot.extra``): page
    state a solver needs that the DOM does not show (a slider's range, a table of synonyms)."""


ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4, "6th": 5, "7th": 6, "8th": 7, "9th": 8}


def click_on(e: Element | None) -> Move | None:
    """A click where ``e`` is reached (None: no element, or nothing of it can be clicked)."""
    return click(e.point) if e is not None and e.point is not None else None


def with_own_text(snap: Snapshot, text: str, tags: Iterable[str] | None = None) -> list[Element]:
    """The elements (of ``tags``) whose own text is ``text``."""
    allowed = set(tags) if tags is not None else None
    return [e for e in snap if e.own == text and (allowed is None or e.tag in allowed)]


def with_text(snap: Snapshot, text: str, tags: Iterable[str] | None = None) -> list[Element]:
    """The innermost elements (of ``tags``) whose rendered text is ``text``."""
    allowed = set(tags) if tags is not None else None
    found = [e for e in snap if e.text == text and (allowed is None or e.tag in allowed)]
    inner = {e.parent for e in found}
    return [e for e in found if e.i not in inner] or found


def first(elements: Sequence[Element]) -> Element | None:
    return elements[0] if elements else None


def visible(elements: Iterable[Element]) -> list[Element]:
    """Those a click reaches."""
    return [e for e in elements if e.point is not None]


def bold(snap: Snapshot) -> list[str]:
    """The banner's bold words (many tasks put the value to use there)."""
    query = snap.by_id("query")
    return [e.own for e in snap if query is not None and e.parent == query.i and "bold" in e.classes]


def submit_button(snap: Snapshot, label: str = "Submit") -> Element | None:
    """The task's submit button: ``#subbtn``, or a button labelled ``label``."""
    return snap.by_id("subbtn") or first(with_own_text(snap, label, ("button",)))


def label_input(snap: Snapshot, label: Element) -> Element | None:
    """The input inside ``label`` (a checkbox's or radio's)."""
    return first([e for e in snap.inside(label) if e.tag == "input"])


def fill(field: Element, text: str, history: History) -> Move | None:
    """The next move towards ``field`` holding ``text``: focus it, select what it holds (to be typed
    over), then type; None once it holds ``text``."""
    if field.value == text:
        return None
    if not field.focused:
        return click_on(field)
    if field.value and not (history and history[-1] == press("ctrl", "a")):
        return press("ctrl", "a")
    return type_text(text)


def fill_form(snap: Snapshot, history: History, fields: Sequence[tuple[Element | None, str]],
              submit: Element | None) -> Move | None:  # fmt: skip
    """Each field filled in turn, then ``submit`` clicked."""
    for field, text in fields:
        if field is None:
            return None
        if (move := fill(field, text, history)) is not None:
            return move
    return click_on(submit)


def words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text)


def listed(phrase: str) -> list[str]:
    """``"a, b, and c"`` / ``"a, b"`` / ``"nothing"`` as its items."""
    phrase = phrase.strip()
    if phrase == "nothing" or not phrase:
        return []
    return [p.strip() for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", phrase) if p.strip()]
