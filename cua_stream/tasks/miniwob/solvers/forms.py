"""Solvers of the tasks that type: text from the banner, computed from it, or read off the page, into a
field, then Submit. Pure."""

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
    fill_form,
    first,
    submit_button,
)


def enter_text(snap: Snapshot, history: History) -> Move | None:
    """'Enter "Alan" into the text field and press Submit.' (also enter-text-dynamic)."""
    said = bold(snap)
    return fill_form(snap, history, [(snap.by_id("tt"), said[0] if said else "")], submit_button(snap))


def enter_text_2(snap: Snapshot, history: History) -> Move | None:
    """'Type "agustina" in all upper case letters in the text input and press Submit.'"""
    said = bold(snap)
    if not said:
        return None
    text = said[0].upper() if "upper case" in snap.utterance else said[0].lower()
    return fill_form(snap, history, [(snap.by_id("tt"), text)], submit_button(snap))


def enter_password(snap: Snapshot, history: History) -> Move | None:
    """'Enter the password "WCob" into both text fields and press submit.'"""
    said = quoted(snap.utterance)
    if not said:
        return None
    fields = [(snap.by_id("password"), said[0]), (snap.by_id("verify"), said[0])]
    return fill_form(snap, history, fields, submit_button(snap))


def login_user(snap: Snapshot, history: History) -> Move | None:
    """'Enter the username "beaulah" and the password "vp" into the text fields and press login.'"""
    said = quoted(snap.utterance)
    if len(said) < 2:
        return None
    fields = [(snap.by_id("username"), said[0]), (snap.by_id("password"), said[1])]
    return fill_form(snap, history, fields, submit_button(snap, "Login"))


def simple_arithmetic(snap: Snapshot, history: History) -> Move | None:
    """The problem ``#math-problem`` shows ('3 x 4 = ') worked out, typed into ``#math-answer``."""
    problem = snap.by_id("math-problem")
    found = re.match(r"(-?\d+) ([-+x]) (-?\d+) =", problem.text if problem else "")
    if not found:
        return None
    a, op, b = int(found.group(1)), found.group(2), int(found.group(3))
    answer = a + b if op == "+" else a - b if op == "-" else a * b
    return fill_form(snap, history, [(snap.by_id("math-answer"), str(answer))], submit_button(snap))


def simple_algebra(snap: Snapshot, history: History) -> Move | None:
    """The equation ``#math-problem`` shows ('x - 4 = 7', '4 + x = 7') solved, x typed into
    ``#math-answer``."""
    problem = snap.by_id("math-problem")
    text = problem.text if problem else ""
    if found := re.match(r"x ([-+]) (\d+) = (-?\d+)", text):
        op, b, c = found.group(1), int(found.group(2)), int(found.group(3))
        x = c - b if op == "+" else c + b
    elif found := re.match(r"(\d+) ([-+]) x = (-?\d+)", text):
        a, op, c = int(found.group(1)), found.group(2), int(found.group(3))
        x = c - a if op == "+" else a - c
    else:
        return None
    return fill_form(snap, history, [(snap.by_id("math-answer"), str(x))], submit_button(snap))


def copy_paste(snap: Snapshot, history: History) -> Move | None:
    """The text area's text typed into the answer field (the teacher types what a user would paste)."""
    area = first(snap.find("textarea"))
    if area is None or area.value is None:
        return None
    return fill_form(snap, history, [(snap.by_id("answer-input"), area.value)], submit_button(snap))


def copy_paste_2(snap: Snapshot, history: History) -> Move | None:
    """'Copy the text from the 2nd text area below ...': that text area's text typed into the answer."""
    said = bold(snap)
    n = ORDINALS.get(said[0], -1) if said else -1
    area = snap.by_id(f"text-{n + 1}")
    if area is None or area.value is None:
        return None
    return fill_form(snap, history, [(snap.by_id("answer-input"), area.value)], submit_button(snap))


def find_word(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Find the 4th word in the paragraph, type that into the textbox and press "Submit".': the
    paragraph's n-th word, its punctuation dropped (the page drops it from the answer too)."""
    said = bold(snap)
    found = re.match(r"(\d+)(?:st|nd|rd|th) word", said[0] if said else "")
    paragraph = first([e for e in snap if e.tag == "p" and e.own])
    if not found or paragraph is None:
        return None
    n = int(found.group(1)) - 1
    found_words = [re.sub(r"[^a-zA-Z]", "", w) for w in paragraph.own.split()]
    if not 0 <= n < len(found_words):
        return None
    return fill_form(snap, history, [(snap.by_id("answer-input"), found_words[n])], submit_button(snap))


def click_collapsible(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Expand the section below and click submit.': the section opened, then Submit (in it)."""
    header = first([e for e in snap if "ui-accordion-header" in e.classes and e.tag == "h3"])
    if header is None:
        return None
    if header.attrs.get("aria-expanded") != "true":
        return click_on(header)
    return click_on(submit_button(snap))


def odd_or_even(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Mark the numbers below as odd or even ...': each row's Odd or Even button selected, then
    Submit."""
    for row in snap:
        if "row" not in row.classes:
            continue
        inside = snap.inside(row)
        number = first([e for e in inside if "display-number" in e.classes])
        if number is None or not re.fullmatch(r"-?\d+", number.own):
            return None
        label = "Odd" if int(number.own) % 2 else "Even"
        button = first([e for e in inside if e.tag == "button" and e.own == label])
        if button is not None and "selected" not in button.classes:
            return click_on(button)
    return click_on(snap.by_id("submit"))


SOLVERS = {
    "enter-text": Solver(enter_text),
    "enter-text-dynamic": Solver(enter_text),
    "enter-text-2": Solver(enter_text_2),
    "enter-password": Solver(enter_password),
    "login-user": Solver(login_user),
    "simple-arithmetic": Solver(simple_arithmetic),
    "simple-algebra": Solver(simple_algebra),
    "copy-paste": Solver(copy_paste),
    "copy-paste-2": Solver(copy_paste_2),
    "find-word": Solver(find_word),
    "click-collapsible": Solver(click_collapsible),
    "click-collapsible-nodelay": Solver(click_collapsible),
    "odd-or-even": Solver(odd_or_even),
}
