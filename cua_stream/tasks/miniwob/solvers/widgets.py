"""Solvers of the tasks with a widget or a form of several steps: autocomplete, a spinner, date and time
inputs, forms laid out in several ways, a popup to dismiss, a search with result pages, a number to guess
from the page's feedback. Pure."""

from __future__ import annotations

import itertools
import re

from cua_stream.tasks.miniwob.dom import Element, Snapshot, quoted
from cua_stream.tasks.miniwob.moves import Move, click, press
from cua_stream.tasks.miniwob.solvers.common import (
    History,
    Solver,
    bold,
    click_on,
    fill,
    fill_form,
    first,
    label_input,
    listed,
    submit_button,
    visible,
)


def click_checkboxes_soft(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Select words similar to big, mad and click Submit.': each box whose label is a synonym of
    a named word (the page's own table of synonyms, ``SYNONYMS``) checked, no other, then Submit."""
    found = re.match(r"Select words similar to (.*) and click Submit", snap.utterance)
    groups = snap.extra if isinstance(snap.extra, list) else []
    if not found:
        return None
    named = set(listed(found.group(1)))
    similar = {w for group in groups if named & set(group) for w in group}
    for label in snap.find("label"):
        box = label_input(snap, label)
        if box is not None and box.checked != (label.own in similar):
            return click_on(box)
    return click_on(submit_button(snap))


def use_autocomplete(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Enter an item that starts with "Ke" and ends with "ya".': the first of the page's items
    (``ui_utils.COUNTRIES``) that does, typed whole; the suggestions menu closed (it may cover Submit),
    then Submit."""
    said = bold(snap)
    items = snap.extra if isinstance(snap.extra, list) else []
    start, end = ([*said, "", ""])[:2] if said else ("", "")
    wanted = next((i for i in items if i.startswith(start) and i.endswith(end)), None)
    field = snap.by_id("tags")
    if wanted is None or field is None:
        return None
    if (move := fill(field, wanted, history)) is not None:
        return move
    if visible(e for e in snap if "ui-autocomplete" in e.classes):
        return press("escape")
    return click_on(submit_button(snap))


def use_spinner(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Select -4 with the spinner and hit Submit.': the spinner's arrows clicked until it shows
    the value (the field takes no keys), then Submit."""
    found = re.search(r"Select (-?\d+) with the spinner", snap.utterance)
    field = snap.by_id("spinner")
    if not found or field is None or not re.fullmatch(r"-?\d+", field.value or ""):
        return None
    want, now = int(found.group(1)), int(field.value or 0)
    if want == now:
        return click_on(submit_button(snap))
    arrow = "ui-spinner-up" if want > now else "ui-spinner-down"
    return click_on(first([e for e in snap if arrow in e.classes]))


def _first_segment(field: Element) -> Move:
    """A click on a date or time input's first segment (its left end): typing then fills the segments
    from the first."""
    x, y, _, h = field.box
    return click((x + 4, y + h / 2))


def enter_date(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Enter 03/27/2015 as the date and hit submit.': the date input's segments typed in order
    (month, day, year), then Submit."""
    said = bold(snap)
    field = snap.by_id("tt")
    found = re.fullmatch(r"(\d\d)/(\d\d)/(\d{4})", said[0] if said else "")
    if field is None or not found:
        return None
    month, day, year = found.groups()
    return _typed_into_segments(snap, history, field, f"{year}-{month}-{day}", month + day + year)


def enter_time(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Enter 4:07 PM as the time and press submit.': the time input's segments typed in order
    (hour, minute, AM/PM), then Submit."""
    found = re.search(r"Enter (\d{1,2}):(\d\d) ([AP]M) as the time", snap.utterance)
    field = snap.by_id("tt")
    if field is None or not found:
        return None
    hour, minute, half = int(found.group(1)), found.group(2), found.group(3)
    value = f"{hour % 12 + (12 if half == 'PM' else 0):02d}:{minute}"
    return _typed_into_segments(snap, history, field, value, f"{hour:02d}{minute}{half[0]}")


def _typed_into_segments(snap: Snapshot, history: History, field: Element, value: str,
                         keys: str) -> Move | None:  # fmt: skip
    """A date or time input brought to ``value`` (what it reports) by typing ``keys`` from its first
    segment, then Submit; typed once only (typing again would not start from the first segment)."""
    if field.value == value:
        return click_on(submit_button(snap))
    if not any(m.kind == "type" for m in history):
        if not history or history[-1].kind != "click":
            return _first_segment(field)
        return Move("type", text=keys)
    return None


_FIELDS = (("genre", "genre"), ("director", "name"), ("year", "year"), ("date", "year"))
"""A form's labels (lower case) → the banner's value they take."""


def movie_search(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Search for comedy movies directed by Smith from year 1999.' (multi-layouts,
    multi-orderings): each field filled by the label beside it, whatever the layout, then the form's
    button (Submit, Search or Go!)."""
    said = [e.own for e in snap if e.tag == "b"]
    if len(said) != 3:
        return None
    values = dict(zip(("genre", "name", "year"), said, strict=True))
    fields: list[tuple[Element | None, str]] = []
    for field in snap.find("input"):
        label = _row_text(snap, field).lower()
        key = next((v for k, v in _FIELDS if k in label), None)
        if key is None:
            return None
        fields.append((field, values[key]))
    button = first([e for e in snap if e.own in ("Submit", "Search", "Go!") and e.point is not None])
    return fill_form(snap, history, fields, button)


def _row_text(snap: Snapshot, field: Element) -> str:
    """The text of the nearest element around ``field`` that has any: its label's row."""
    row = snap.parent(field)
    while row is not None and not row.text:
        row = snap.parent(row)
    return row.text if row is not None else ""


def login_user_popup(snap: Snapshot, history: History) -> Move | None:
    """login-user, with a popup that may open on focusing a field ("Exit to home page?"): Cancel
    dismisses it (OK would end the episode)."""
    popup = snap.by_id("popup-cancel")
    if popup is not None and popup.point is not None:
        return click_on(popup)
    said = quoted(snap.utterance)
    if len(said) < 2:
        return None
    fields = [(snap.by_id("username"), said[0]), (snap.by_id("password"), said[1])]
    return fill_form(snap, history, fields, submit_button(snap, "Login"))


def search_engine(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Use the textbox to enter "Kasie" and press "Search", then find and click the 5th search
    result.': the search typed and run, then the result's page opened (three results a page), then the
    result clicked."""
    said = bold(snap)
    found = re.match(r"(\d+)", said[1] if len(said) > 1 else "")
    field = snap.by_id("search-text")
    if field is None or not found:
        return None
    index = int(found.group(1)) - 1
    results = [e for e in snap if "search-title" in e.classes]
    if not results:
        if (move := fill(field, said[0], history)) is not None:
            return move
        return click_on(snap.by_id("search"))
    shown = first([e for e in results if e.attrs.get("data-result") == str(index)])
    if shown is not None:
        return click_on(shown)
    page = str(index // 3 + 1)
    return click_on(first([e for e in snap if e.tag == "a" and e.own == page and e.point is not None]))


def guess_number(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Guess the number between 0-9 and press Submit. Use the feedback below ...': a binary
    search. The page shows the feedback to the last guess only; the earlier guesses' feedback is read
    from the guesses themselves (a next guess above the last one means the page said higher)."""
    field = snap.by_id("tt")
    if field is None:
        return None
    guesses = [int(m.text) for m in history if m.kind == "type" and m.text.isdigit()]
    submitted = sum(1 for m in history if m.kind == "click" and m == click_on(snap.by_id("subbtn")))
    low, high = 0, 9
    for before, after in itertools.pairwise(guesses):
        low, high = (before + 1, high) if after > before else (low, before - 1)
    if guesses and submitted >= len(guesses):  # the last guess was submitted: its feedback is on show
        higher, lower = snap.by_id("higher"), snap.by_id("lower")
        if higher is not None and higher.point is not None:
            low = guesses[-1] + 1
        elif lower is not None and lower.point is not None:
            high = guesses[-1] - 1
        else:
            return None
    elif guesses:  # typed, not yet submitted
        return click_on(snap.by_id("subbtn"))
    guess = str((low + high) // 2)
    return fill(field, guess, history) or click_on(snap.by_id("subbtn"))


def email_inbox(snap: Snapshot, history: History) -> Move | None:
    """Banner: 'Find the email by Darcy and reply to them with the text "Ok"' (or forward that email to
    Kasey, click the trash icon, click the star icon): the email found by its sender in the inbox, then
    its action; a reply or a forward written in its form and sent."""
    said, quotes = bold(snap), quoted(snap.utterance)
    if not said:
        return None
    name, text = said[0], snap.utterance
    if (reply := snap.by_id("reply-text")) is not None:
        return fill_form(snap, history, [(reply, quotes[-1] if quotes else "")], snap.by_id("send-reply"))
    if (send := snap.by_id("send-forward")) is not None:
        to = first([e for e in snap if "forward-sender" in e.classes])
        return fill_form(snap, history, [(to, said[-1])], send)
    if "reply to them" in text or "forward that email" in text:
        opened = first(
            visible(
                e
                for e in snap
                if ("email-reply" if "reply to them" in text else "email-forward") in e.classes
            )
        )
        if opened is not None:
            return click_on(opened)
    for thread in snap:
        if "email-thread" not in thread.classes:
            continue
        inside = snap.inside(thread)
        if not any("email-sender" in e.classes and e.own == name for e in inside):
            continue
        icon = "trash" if "trash icon" in text else "star" if "star icon" in text else None
        if icon is None:
            return click_on(first([e for e in inside if "email-sender" in e.classes]))
        return click_on(first([e for e in inside if icon in e.classes]))
    return None


SOLVERS = {
    "click-checkboxes-soft": Solver(click_checkboxes_soft, extra="SYNONYMS"),
    "use-autocomplete": Solver(use_autocomplete, extra="ui_utils.COUNTRIES"),
    "use-autocomplete-nodelay": Solver(use_autocomplete, extra="ui_utils.COUNTRIES"),
    "use-spinner": Solver(use_spinner),
    "enter-date": Solver(enter_date),
    "enter-time": Solver(enter_time),
    "multi-layouts": Solver(movie_search),
    "multi-orderings": Solver(movie_search),
    "login-user-popup": Solver(login_user_popup),
    "search-engine": Solver(search_engine),
    "guess-number": Solver(guess_number),
    "email-inbox-delete": Solver(email_inbox),
    "email-inbox-important": Solver(email_inbox),
    "email-inbox-noscroll": Solver(email_inbox),
    "email-inbox-reply": Solver(email_inbox),
    "email-inbox-star-reply": Solver(email_inbox),
    "email-inbox-forward": Solver(email_inbox),
}
