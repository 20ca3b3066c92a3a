"""Solvers of the tasks one or a few clicks solve, the element named by the banner. Pure."""

from __future__ import annotations

import re

from cua_stream.tasks.miniwob.dom import Snapshot, quoted
from cua_stream.tasks.miniwob.moves import Move
from cua_stream.tasks.miniwob.solvers.common import (
    ORDINALS,
    History,
    Solver,
    bold,
    click_on,
    first,
    label_input,
    listed,
    submit_button,
    visible,
    with_own_text,
)


def click_test(snap: Snapshot, history: History) -> Move | None:
    return click_on(snap.by_id("subbtn"))


def click_named_button(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Click button ONE.' (click-test-2, click-test-transfer)."""
    found = re.search(r"button (\w+)", snap.utterance)
    return click_on(first(with_own_text(snap, found.group(1), ("button",)))) if found else None


def click_button_sequence(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Click button ONE, then click button TWO.': the page shows nothing of the first click, so
    the moves already made say which is next."""
    names = re.findall(r"button (\w+)", snap.utterance)
    if len(history) >= len(names):
        return None
    return click_on(first(with_own_text(snap, names[len(history)], ("button",))))


def click_quoted_button(snap: Snapshot, history: History) -> Move | None:
    """'Click on the "yes" button.' (click-button, unicode-test)."""
    names = quoted(snap.utterance)
    return click_on(first(visible(with_own_text(snap, names[0], ("button",))))) if names else None


def click_link(snap: Snapshot, history: History) -> Move | None:
    """A link (``.alink``) whose text is the quoted one: click-link; on click-tab-2 and
    click-collapsible-2 the link may be in a tab or section not shown yet, opened first (each in turn)."""
    names = quoted(snap.utterance)
    if not names:
        return None
    links = [e for e in with_own_text(snap, names[-1]) if "alink" in e.classes]
    if shown := visible(links):
        return click_on(shown[0])
    # not on show: open the next tab or section not opened yet (in page order)
    for header in snap:
        is_tab = header.tag == "a" and "ui-tabs-anchor" in header.classes
        is_section = "ui-accordion-header" in header.classes and header.tag == "h3"
        if (is_tab or is_section) and header.attrs.get("aria-expanded") != "true":
            move = click_on(header)
            if move is not None and move not in history:
                return move
    return None


def click_dialog(snap: Snapshot, history: History) -> Move | None:
    """Close the dialog (its title bar's close button, "x")."""
    return click_on(first([e for e in snap if e.tag == "button" and e.attrs.get("title") == "Close"]))


def click_dialog_2(snap: Snapshot, history: History) -> Move | None:
    """'Click the button in the dialog box labeled "OK".' ("x": the close button)."""
    names = quoted(snap.utterance)
    if not names:
        return None
    if names[0] == "x":
        return click_dialog(snap, history)
    return click_on(first(with_own_text(snap, names[0], ("button",))))


def click_tab(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Click on Tab #2.'."""
    found = re.search(r"(Tab #\d+)", snap.utterance)
    return click_on(first(with_own_text(snap, found.group(1), ("a",)))) if found else None


def click_widget(snap: Snapshot, history: History) -> Move | None:
    """'Click on a "checkbox" widget.': an element whose ``data-type`` is the quoted one."""
    names = quoted(snap.utterance)
    return click_on(first(visible(e for e in snap if names and e.attrs.get("data-type") == names[0])))


def click_color(snap: Snapshot, history: History) -> Move | None:
    """Click on the red colored box: the box whose ``data-color`` is the banner's bold word; or, with a
    swatch in the banner instead ("Click on the colored box."), the box drawn in the swatch's colour."""
    boxes = [e for e in snap if "color" in e.classes and "data-color" in e.attrs]
    if wanted := bold(snap):
        return click_on(first([e for e in boxes if e.attrs["data-color"] == wanted[0]]))
    swatch = snap.by_id("query-color")
    return click_on(first([e for e in boxes if swatch is not None and e.bg == swatch.bg]))


def focus_text(snap: Snapshot, history: History) -> Move | None:
    return click_on(first([e for e in snap if e.tag == "input"]))


def focus_text_2(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Focus into the 2nd input textbox.': the inputs in page order."""
    found = re.search(r"(\d+(?:st|nd|rd|th))", snap.utterance)
    inputs = [e for e in snap if e.tag == "input"]
    n = ORDINALS.get(found.group(1), -1) if found else -1
    return click_on(inputs[n]) if 0 <= n < len(inputs) else None


def select_and_submit(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Select A, B and click Submit.' (click-option, click-checkboxes, -large, -transfer): each
    labelled box set as asked (checked if named, else not), then Submit."""
    found = re.match(r"Select (.*) and click Submit", snap.utterance)
    if not found:
        return None
    wanted = set(listed(found.group(1)))
    for label in snap.find("label"):
        box = label_input(snap, label)
        if box is not None and box.checked != (label.own in wanted):
            return click_on(box)
    return click_on(submit_button(snap))


def click_shades(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Select all the shades of blue and press Submit.': each square of that colour selected (a
    click toggles its ``selected`` class), no other, then Submit."""
    found = re.search(r"shades of (\w+)", snap.utterance)
    if not found:
        return None
    for square in snap.find("span"):
        colour = square.attrs.get("data-color")
        if colour is not None and ("selected" in square.classes) != (colour == found.group(1)):
            return click_on(square)
    return click_on(submit_button(snap))


def click_menu(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Select Ailey>Brook': each item of the path in turn (hovering an item opens its submenu),
    the last clicked."""
    found = re.match(r"Select (.*)$", snap.utterance)
    if not found:
        return None
    path = found.group(1).split(">")
    for depth, name in enumerate(path):
        item = first(visible(with_own_text(snap, name, ("div",))))
        if item is None or item.point is None:
            return None
        if depth == len(path) - 1:
            return click_on(item)
        sub = path[depth + 1]
        if not visible(with_own_text(snap, sub, ("div",))):
            return Move("hover", *item.point)
    return None


def grid_coordinate(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Click on the grid coordinate (1,-2).': the circle whose id is it."""
    wanted = bold(snap)
    return click_on(first([e for e in snap if wanted and e.tag == "circle" and e.id == wanted[0]]))


def navigate_tree(snap: Snapshot, history: History) -> Move | None:
    """'... Find and click on the folder or file named "Kasey".': click it if shown, else open the
    next closed folder (in page order) that has not been opened yet."""
    names = quoted(snap.utterance)
    if not names:
        return None
    target = first(visible(with_own_text(snap, names[0], ("span",))))
    if target is not None:
        return click_on(target)
    for folder in snap.find("span"):
        if "folder" in folder.classes and (move := click_on(folder)) is not None and move not in history:
            return move
    return None


def identify_shape(snap: Snapshot, history: History) -> Move | None:
    """The button naming the one shape drawn: its ``data-type`` is the shape's type (letter, digit) or
    its kind (circle, rectangle, triangle), read from the drawn SVG element."""
    drawn = [e for e in snap if e.tag in ("text", "circle", "rect", "polygon") and e.attrs.get("fill")]
    if len(drawn) != 1:
        return None
    shape = drawn[0]
    if shape.tag == "text":
        kind = "digit" if shape.own.isdigit() else "letter"
    else:
        kind = {"circle": "circle", "rect": "rectangle", "polygon": "triangle"}[shape.tag]
    return click_on(first([e for e in snap if e.tag == "button" and e.attrs.get("data-type") == kind]))


SOLVERS = {
    "click-test": Solver(click_test),
    "click-test-2": Solver(click_named_button),
    "click-test-transfer": Solver(click_named_button),
    "click-button-sequence": Solver(click_button_sequence),
    "click-button": Solver(click_quoted_button),
    "unicode-test": Solver(click_quoted_button),
    "click-link": Solver(click_link),
    "click-tab-2": Solver(click_link),
    "click-tab-2-easy": Solver(click_link),
    "click-tab-2-medium": Solver(click_link),
    "click-tab-2-hard": Solver(click_link),
    "click-collapsible-2": Solver(click_link),
    "click-collapsible-2-nodelay": Solver(click_link),
    "click-dialog": Solver(click_dialog),
    "click-dialog-2": Solver(click_dialog_2),
    "click-tab": Solver(click_tab),
    "click-widget": Solver(click_widget),
    "click-color": Solver(click_color),
    "focus-text": Solver(focus_text),
    "focus-text-2": Solver(focus_text_2),
    "click-option": Solver(select_and_submit),
    "click-checkboxes": Solver(select_and_submit),
    "click-checkboxes-large": Solver(select_and_submit),
    "click-checkboxes-transfer": Solver(select_and_submit),
    "click-shades": Solver(click_shades),
    "click-menu": Solver(click_menu),
    "grid-coordinate": Solver(grid_coordinate),
    "navigate-tree": Solver(navigate_tree),
    "identify-shape": Solver(identify_shape),
}
