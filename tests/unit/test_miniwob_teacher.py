"""The MiniWoB++ teacher's pure parts: each solver reads the banner and the page (a snapshot built here as the
shadow page's script returns it) and names the element to click or the text to type; its moves become
computer-1 actions placed by the frame found on the screenshot; the random policy is seeded."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cua_stream.binding.coordinates import GRID_MAX
from cua_stream.tasks.miniwob.dom import Snapshot, parse, quoted
from cua_stream.tasks.miniwob.moves import Move, click, key_events, press, type_text
from cua_stream.tasks.miniwob.screen import Frame, desktop_size, frame_on, to_grid
from cua_stream.tasks.miniwob.solvers import SOLVERS
from cua_stream.tasks.miniwob.solvers.common import fill, listed
from cua_stream.tasks.miniwob.teacher import WAIT, action_of
from cua_stream.tasks.policies import random_action
from cua_stream.tasks.policy_server import episode_of, plays


def el(tag: str, *, box: tuple[float, float, float, float] = (10, 60, 20, 10), parent: int = -1,
       covered: bool = False, **fields: Any) -> dict[str, Any]:  # fmt: skip
    """One element as the snapshot script reports it (its point the box's centre unless ``covered``)."""
    x, y, w, h = box
    base = {"tag": tag, "id": "", "cls": "", "text": "", "own": "", "value": None, "type": "", "name": "",
            "checked": False, "disabled": False, "focused": False, "parent": parent, "box": list(box),
            "point": None if covered else [x + w / 2, y + h / 2], "attrs": {}, "bg": "", "color": ""}  # fmt: skip
    base.update(fields)
    if base["own"] and not base["text"]:
        base["text"] = base["own"]
    return base


def page(utterance: str, *elements: dict[str, Any], bold: tuple[str, ...] = ()) -> Snapshot:
    """A task page: ``#query`` (with ``bold`` words in it) first, then ``elements`` (their ``parent``
    indices count from the first of them, as ``el`` gives them; -1: the page)."""
    head = [el("div", id="query", own=utterance, box=(0, 0, 160, 50))]
    head += [el("span", cls="bold", own=b, parent=0, box=(0, 0, 10, 10)) for b in bold]
    shift = len(head)
    body = [dict(e, parent=e["parent"] + shift if e["parent"] >= 0 else -1) for e in elements]
    return parse({"utterance": utterance, "elements": head + body, "ended": False})


def clicked(snap: Snapshot, move: Move | None) -> str:
    """The element ``move`` clicks (its own text or id), read back from the snapshot."""
    assert move is not None and move.kind == "click", move
    hits = [e for e in snap if e.point == (move.x, move.y)]
    return hits[-1].own or hits[-1].id


def solve(task: str, snap: Snapshot, history: tuple[Move, ...] = ()) -> Move | None:
    return SOLVERS[task].solve(snap, history)


@pytest.mark.parametrize(
    ("task", "snap", "target"),
    [
        ("click-test-2", page("Click button ONE.", el("button", own="TWO", box=(50, 60, 40, 40)),
                              el("button", own="ONE", box=(0, 100, 40, 40))), "ONE"),
        ("click-button", page('Click on the "no" button.', el("button", own="yes", box=(0, 60, 30, 20)),
                              el("button", own="no", box=(40, 60, 30, 20))), "no"),
        ("unicode-test", page('Click on the "确定" button.', el("button", own="取消", box=(0, 60, 30, 20)),
                              el("button", own="确定", box=(40, 60, 30, 20))), "确定"),
        ("click-link", page('Click on the link "amet".', el("span", cls="alink", own="sit", box=(0, 60, 20, 10)),
                            el("span", own="amet", box=(30, 60, 20, 10)),  # not a link
                            el("span", cls="alink", own="amet", box=(60, 60, 20, 10), id="the-link")), "amet"),
        ("click-dialog-2", page('Click the button in the dialog box labeled "OK".',
                                el("button", own="Close", attrs={"title": "Close"}, box=(100, 60, 20, 20)),
                                el("button", own="Cancel", box=(10, 150, 40, 20)),
                                el("button", own="OK", box=(60, 150, 40, 20))), "OK"),
        ("click-dialog-2", page('Click the button in the dialog box labeled "x".',
                                el("button", own="Close", attrs={"title": "Close"}, box=(100, 60, 20, 20)),
                                el("button", own="OK", box=(60, 150, 40, 20))), "Close"),
        ("click-tab", page("Click on Tab #3.", el("a", own="Tab #1", box=(0, 55, 40, 20)),
                           el("a", own="Tab #3", box=(90, 55, 40, 20))), "Tab #3"),
        ("click-widget", page('Click on a "radio" widget.',
                              el("input", type="checkbox", id="c", attrs={"data-type": "checkbox"}, box=(0, 60, 10, 10)),
                              el("input", type="radio", id="r", attrs={"data-type": "radio"}, box=(0, 80, 10, 10))), "r"),
        ("click-color", page("Click on the red colored box.",
                             el("div", cls="color", id="b", attrs={"data-color": "blue"}, box=(20, 80, 50, 50)),
                             el("div", cls="color", id="r", attrs={"data-color": "red"}, box=(80, 80, 50, 50)),
                             bold=("red",)), "r"),
        ("click-color", page("Click on the colored box.",
                             el("div", cls="color", id="query-color", bg="rgb(0, 0, 0)", box=(65, 5, 12, 12)),
                             el("div", cls="color", id="b", attrs={"data-color": "blue"}, bg="rgb(0, 0, 255)", box=(20, 80, 50, 50)),
                             el("div", cls="color", id="k", attrs={"data-color": "black"}, bg="rgb(0, 0, 0)", box=(80, 80, 50, 50))), "k"),
        ("focus-text-2", page("Focus into the 2nd input textbox.", el("input", id="tt1", box=(10, 60, 100, 20)),
                              el("input", id="tt2", box=(10, 100, 100, 20)), el("input", id="tt3", box=(10, 140, 100, 20))), "tt2"),
        ("grid-coordinate", page("Click on the grid coordinate (1,-2).", el("circle", id="(-2,2)", box=(10, 60, 8, 8)),
                                 el("circle", id="(1,-2)", box=(100, 180, 8, 8)), bold=("(1,-2)",)), "(1,-2)"),
        ("identify-shape", page("Click the button that best describes the figure below.",
                                el("text", own="7", attrs={"fill": "red"}, box=(60, 100, 20, 30)),
                                el("button", own="Letter", attrs={"data-type": "letter"}, box=(0, 150, 30, 20)),
                                el("button", own="Digit", attrs={"data-type": "digit"}, box=(40, 150, 30, 20))), "Digit"),
    ],
)  # fmt: skip
def test_a_solver_clicks_the_element_the_banner_names(task: str, snap: Snapshot, target: str) -> None:
    assert clicked(snap, solve(task, snap)) == target


def test_a_covered_element_is_not_clicked() -> None:
    snap = page("Click button ONE.", el("button", own="ONE", covered=True))
    assert solve("click-test-2", snap) is None


def test_checkboxes_are_set_as_asked_then_submitted() -> None:
    def boxes(*checked: bool) -> Snapshot:
        items: list[dict[str, Any]] = []
        for i, (name, on) in enumerate(zip(("ab", "cd", "ef"), checked, strict=True)):
            items.append(el("label", own=name, box=(0, 60 + 20 * i, 40, 12)))
            items.append(
                el(
                    "input",
                    type="checkbox",
                    id=f"ch{i}",
                    checked=on,
                    parent=2 * i,
                    box=(2, 60 + 20 * i, 10, 10),
                )
            )
        items.append(el("button", id="subbtn", own="Submit", box=(0, 150, 60, 30)))
        return page("Select ab, ef and click Submit.", *items)  # fmt: skip

    assert clicked(boxes(False, True, False), solve("click-checkboxes", boxes(False, True, False))) == "ch0"
    assert clicked(boxes(True, True, False), solve("click-checkboxes", boxes(True, True, False))) == "ch1"
    assert clicked(boxes(True, False, True), solve("click-checkboxes", boxes(True, False, True))) == "Submit"
    assert listed("nothing") == [] and listed("a, b, and c") == ["a", "b", "c"] and listed("a") == ["a"]


def test_a_sequence_the_page_does_not_show_follows_the_moves_made() -> None:
    snap = page("Click button ONE, then click button TWO.", el("button", own="ONE", box=(0, 60, 40, 40)),
                el("button", own="TWO", box=(60, 60, 40, 40)))  # fmt: skip
    first = solve("click-button-sequence", snap)
    assert clicked(snap, first) == "ONE"
    assert clicked(snap, solve("click-button-sequence", snap, (first,))) == "TWO"  # type: ignore[arg-type]
    assert solve("click-button-sequence", snap, (first, first)) is None  # type: ignore[arg-type]


def form(utterance: str, value: str | None, focused: bool, bold: tuple[str, ...] = ("Alan",)) -> Snapshot:
    return page(utterance, el("input", id="tt", type="text", value=value or "", focused=focused, box=(10, 60, 120, 20)),
                el("button", id="subbtn", own="Submit", box=(10, 100, 100, 30)), bold=bold)  # fmt: skip


def test_a_field_is_focused_typed_into_then_submitted() -> None:
    said = 'Enter "Alan" into the text field and press Submit.'
    assert clicked(form(said, "", False), solve("enter-text", form(said, "", False))) == "tt"
    assert solve("enter-text", form(said, "", True)) == type_text("Alan")
    assert clicked(form(said, "Alan", True), solve("enter-text", form(said, "Alan", True))) == "Submit"
    upper = 'Type "agustina" in all upper case letters in the text input and press Submit.'
    assert solve("enter-text-2", form(upper, "", True, ("agustina",))) == type_text("AGUSTINA")


def test_a_field_holding_other_text_is_selected_and_typed_over() -> None:
    field = page("x", el("input", id="tt", value="wrong", focused=True)).by_id("tt")
    assert field is not None
    assert fill(field, "Alan", ()) == press("ctrl", "a")
    assert fill(field, "Alan", (press("ctrl", "a"),)) == type_text("Alan")


@pytest.mark.parametrize(
    ("task", "problem", "answer"),
    [("simple-arithmetic", "3 x 4 =", "12"), ("simple-arithmetic", "2 - 9 =", "-7"),
     ("simple-algebra", "x - 4 = 7", "11"), ("simple-algebra", "4 + x = 7", "3"),
     ("simple-algebra", "9 - x = 12", "-3")],
)  # fmt: skip
def test_arithmetic_is_worked_out_and_typed(task: str, problem: str, answer: str) -> None:
    snap = page("Solve the math problem and type your answer into the textbox. Press submit when done.",
                el("div", id="math-problem", own=problem), el("input", id="math-answer", focused=True, box=(0, 100, 50, 20)),
                el("button", id="subbtn", own="Submit", box=(0, 150, 60, 30)))  # fmt: skip
    assert solve(task, snap) == type_text(answer)


def test_login_fills_both_fields_in_order() -> None:
    snap = page('Enter the username "kasey" and the password "x1" into the text fields and press login.',
                el("input", id="username", value="kasey", box=(0, 70, 100, 20)),
                el("input", id="password", value="", box=(0, 120, 100, 20)),
                el("button", id="subbtn", own="Login", box=(0, 160, 60, 30)))  # fmt: skip
    assert clicked(snap, solve("login-user", snap)) == "password"


def test_find_word_types_the_nth_word_without_its_punctuation() -> None:
    snap = page("Find the 3rd word in the paragraph, type that into the textbox and press \"Submit\".",
                el("p", own="Lorem ipsum, dolor. Sit amet"), el("input", id="answer-input", focused=True),
                el("button", id="subbtn", own="Submit", box=(0, 150, 60, 30)), bold=("3rd word",))  # fmt: skip
    assert solve("find-word", snap) == type_text("dolor")


def test_a_link_not_on_show_opens_each_closed_tab_in_turn() -> None:
    def tabs(shown: bool) -> Snapshot:
        return page('Switch between the tabs to find and click on the link "nunc".',
                    el("a", cls="ui-tabs-anchor", own="Tab #1", attrs={"aria-expanded": "true"}, box=(0, 55, 40, 20)),
                    el("a", cls="ui-tabs-anchor", own="Tab #2", attrs={"aria-expanded": "false"}, box=(50, 55, 40, 20)),
                    el("a", cls="ui-tabs-anchor", own="Tab #3", attrs={"aria-expanded": "false"}, box=(100, 55, 40, 20)),
                    el("span", cls="alink", own="nunc", covered=not shown, box=(20, 120, 30, 10)))  # fmt: skip

    hidden = tabs(False)
    first = solve("click-tab-2", hidden)
    assert clicked(hidden, first) == "Tab #2"
    assert clicked(hidden, solve("click-tab-2", hidden, (first,))) == "Tab #3"  # type: ignore[arg-type]
    assert clicked(tabs(True), solve("click-tab-2", tabs(True), (first,))) == "nunc"  # type: ignore[arg-type]


def test_a_menu_path_is_hovered_open_then_its_leaf_clicked() -> None:
    closed = page("Select Ailey>Brook", el("div", own="Ailey", box=(5, 55, 50, 18)),
                  el("div", own="Brook", covered=True, box=(60, 55, 50, 18)))  # fmt: skip
    assert solve("click-menu", closed) == Move("hover", 30, 64)
    opened = page("Select Ailey>Brook", el("div", own="Ailey", box=(5, 55, 50, 18)),
                  el("div", own="Brook", box=(60, 55, 50, 18)))  # fmt: skip
    assert clicked(opened, solve("click-menu", opened)) == "Brook"


def test_odd_or_even_marks_each_row_then_submits() -> None:
    rows = page("Mark the numbers below as odd or even and press submit when done.",
                el("div", cls="row", box=(0, 60, 160, 20)), el("span", cls="display-number", own="3", parent=0),
                el("button", own="Odd", cls="selected", parent=0, box=(80, 60, 30, 20)),
                el("button", own="Even", parent=0, box=(120, 60, 30, 20)),
                el("div", cls="row", box=(0, 90, 160, 20)), el("span", cls="display-number", own="-4", parent=4),
                el("button", own="Odd", parent=4, box=(80, 90, 30, 20)),
                el("button", own="Even", parent=4, id="even-2", box=(120, 90, 30, 20)),
                el("button", id="submit", own="Submit", box=(0, 150, 60, 30)))  # fmt: skip
    assert clicked(rows, solve("odd-or-even", rows)) == "Even"


def test_quoted_phrases_come_in_order() -> None:
    assert quoted('Enter the username "a b" and the password "c"') == ["a b", "c"]


def test_a_move_becomes_computer_1_action_placed_by_the_frame() -> None:
    frame, desktop = Frame(240, 107, 320), (800, 600)
    assert action_of(click((10, 20)), frame, desktop) == {"type": "click", "x": round(260 * 999 / 799),
                                                          "y": round(147 * 999 / 599)}  # fmt: skip
    drag = action_of(Move("drag", 10, 20, end_x=30, end_y=40), frame, desktop)
    assert (drag["x"], drag["end_x"], drag["end_y"]) == (round(260 * 999 / 799), round(300 * 999 / 799),
                                                         round(187 * 999 / 599))  # fmt: skip
    assert action_of(type_text("hi"), None, desktop) == {"type": "type", "text": "hi"}
    assert action_of(press("ctrl", "a"), None, desktop) == {"type": "keypress", "keys": ["ctrl", "a"]}
    assert action_of(click((10, 20)), None, desktop) == WAIT  # the page is not on screen yet


def test_the_grid_maps_back_to_the_same_pixel_on_every_desktop_pixel() -> None:
    desktop = (800, 600)
    for x in range(800):
        gx, gy = to_grid(x, x % 600, desktop)
        assert round(gx * 799 / GRID_MAX) == x and round(gy * 599 / GRID_MAX) == x % 600


def screenshot(
    left: float, top: float, size: tuple[int, int] = (800, 608), desktop: tuple[int, int] = (800, 600)
) -> np.ndarray:
    """The desktop's #f4f4f4 page with the yellow banner (320x100 desktop pixels) at (``left``, ``top``),
    resized to ``size`` as the binding does, by area averaging."""
    scale = 4  # supersampled, then averaged down: the banner's edges blend as a resize blends them
    w, h = desktop[0] * scale, desktop[1] * scale
    big = np.full((h, w, 3), 0xF4, dtype=np.float64)
    x0, y0 = round(left * scale), round(top * scale)
    big[y0 : y0 + 100 * scale, x0 : x0 + 320 * scale] = (255, 255, 0)
    ys = (np.arange(size[1] + 1) * h / size[1]).astype(int)
    xs = (np.arange(size[0] + 1) * w / size[0]).astype(int)
    out = np.add.reduceat(np.add.reduceat(big, ys[:-1], axis=0), xs[:-1], axis=1)
    counts = np.outer(np.diff(ys), np.diff(xs))[..., None]
    return (out / counts).round().astype(np.uint8)  # fmt: skip


@pytest.mark.parametrize(("left", "top"), [(240, 107), (240, 134), (241, 101), (17, 389)])
def test_the_frame_is_found_on_a_resized_screenshot_to_the_pixel(left: int, top: int) -> None:
    """800x600 is shown as 800x608: a row of the screenshot is 0.987 of the desktop's, and the banner's
    edges blend with the page's; the frame's corner is still found on its own pixel."""
    assert frame_on(screenshot(left, top), (800, 600)) == Frame(left, top, 320)


def test_no_banner_no_frame() -> None:
    assert frame_on(np.full((608, 800, 3), 0xF4, dtype=np.uint8), (800, 600)) is None


def test_the_desktop_size_is_read_from_computer_1s_prompt() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "... The display is 1024x768 pixels. ..."}]}
    ]
    assert desktop_size(messages, (1024, 768)) == (1024, 768)
    assert desktop_size([{"role": "user", "content": "The display is 800x600 pixels."}], (800, 608)) == (
        800,
        600,
    )
    assert desktop_size([], (800, 608)) == (800, 608)


def test_key_combinations_hold_their_modifiers() -> None:
    down, up = key_events(("ctrl", "a"))
    assert down["modifiers"] == 2 and down["key"] == "a" and "text" not in down and up["type"] == "keyUp"
    (enter, _) = key_events(("enter",))
    assert enter["text"] == "\r" and enter["windowsVirtualKeyCode"] == 13


def test_an_episode_path_takes_task_names_with_slashes() -> None:
    assert episode_of("miniwob/click-test/1099511627776") == ("miniwob/click-test", 1099511627776)
    assert episode_of("click-box/3") == ("click-box", 3)
    assert episode_of("miniwob/click-test") is None and episode_of("3") is None


def test_which_policy_plays_which_task() -> None:
    assert plays("oracle", "click-box") and plays("random", "click-box")
    assert plays("oracle", "miniwob/click-test") and plays("idle", "miniwob/click-test")
    assert not plays("oracle", "miniwob/choose-date")  # no solver: the teacher does not play it
    assert plays("nothing", "miniwob/choose-date") and plays("random", "miniwob/choose-date")
    assert not plays("idle", "miniwob/stock-market")  # left out of the suite
    assert not plays("idle", "miniwob/no-such-task") and not plays("teacher", "click-box")


def test_the_random_policy_clicks_anywhere_seeded_by_episode_and_turn() -> None:
    a = random_action("miniwob/click-test", 7, ["r1"])
    assert a == random_action("miniwob/click-test", 7, ["other reply"])  # by turn, not by text
    clicks = {tuple(random_action("miniwob/click-test", 7, ["r"] * n).values()) for n in range(50)}
    assert len(clicks) == 50 and all(c[0] == "click" and 0 <= c[1] <= GRID_MAX and 0 <= c[2] <= GRID_MAX
                                     for c in clicks)  # fmt: skip


def test_shape_descriptions_match_as_the_page_matches_them() -> None:
    from cua_stream.tasks.miniwob.solvers.pointing import description

    assert description("large red item") == ("large", "red", "item")
    assert description("7") == ("", "", "7") and description("small circle") == ("small", "", "circle")
    grid = page("Click on a large red item",
                el("text", own="Q", attrs={"fill": "red"}, box=(0, 60, 8, 12)),  # small
                el("circle", id="big-blue", attrs={"fill": "blue"}, box=(40, 60, 20, 20)),
                el("rect", id="big-red", attrs={"fill": "red"}, box=(80, 60, 20, 20)))  # fmt: skip
    assert clicked(grid, solve("click-shape", grid)) == "big-red"
    counted = page("How many small items are there?", el("text", own="Q", attrs={"fill": "red"}, box=(0, 60, 8, 12)),
                   el("rect", attrs={"fill": "red"}, box=(80, 60, 10, 10)),
                   el("button", own="2", box=(0, 180, 20, 20)), el("button", own="3", box=(30, 180, 20, 20)))  # fmt: skip
    assert clicked(counted, solve("count-shape", counted)) == "2"


def test_a_slider_is_dragged_from_off_its_handle_to_the_pixel_of_the_value() -> None:
    from cua_stream.tasks.miniwob.solvers.pointing import Track, slider_drag

    track = Track((10, 100, 78, 8), (12, 104), {"min": 0, "max": 100, "orientation": "horizontal"})
    move = slider_drag(track, 37)
    assert move is not None and move.kind == "drag"
    assert move.x == 86.5 and move.y == 104.5  # the end away from the handle, on the track's middle row
    pixel = move.end_x - 0.5
    assert round((pixel - 10) / 78 * 100) == 37 and move.end_x % 1 == 0.5  # a whole pixel's centre


def test_guess_number_halves_the_range_using_the_feedback_and_its_own_guesses() -> None:
    def guessing(history: tuple[Move, ...], feedback: str) -> Snapshot:
        shown = {f: el("div", id=f, box=(0, 60, 100, 10), covered=f != feedback) for f in ("higher", "lower")}
        return page("Guess the number between 0-9 and press Submit.", shown["higher"], shown["lower"],
                    el("input", id="tt", focused=True, value=""), el("button", id="subbtn", own="Submit", box=(0, 150, 60, 30)))  # fmt: skip

    submit = click((30, 165))
    assert solve("guess-number", guessing((), "")) == type_text("4")
    typed = (type_text("4"),)
    assert solve("guess-number", guessing(typed, ""), typed) == submit  # typed, then submitted
    # 4 was too low, then 7 too high: the range is 5..6
    history = (type_text("4"), submit, type_text("7"), submit)
    assert solve("guess-number", guessing(history, "lower"), history) == type_text("5")


def test_a_movie_form_is_filled_by_the_label_beside_each_field_whatever_the_layout() -> None:
    snap = page("Search for comedy movies directed by Smith from year 1999.",
                el("b", own="comedy", parent=-1), el("b", own="Smith"), el("b", own="1999"),
                el("div", cls="row", text="Year", box=(0, 60, 160, 20)), el("input", parent=3, value="1999", box=(60, 60, 80, 20)),
                el("div", cls="row", text="Director Name", box=(0, 90, 160, 20)), el("input", id="who", parent=5, box=(60, 90, 80, 20)),
                el("div", cls="row", text="Genre", box=(0, 120, 160, 20)), el("input", parent=7, box=(60, 120, 80, 20)),
                el("button", own="Search", box=(0, 170, 60, 20)))  # fmt: skip
    assert clicked(snap, solve("multi-layouts", snap)) == "who"


def test_a_time_is_typed_segment_by_segment_from_the_first() -> None:
    def timed(value: str) -> Snapshot:
        return page("Enter 4:07 PM as the time and press submit.", el("input", id="tt", type="time", value=value, box=(10, 60, 100, 20)),
                    el("button", id="subbtn", own="Submit", box=(10, 100, 60, 20)))  # fmt: skip

    assert solve("enter-time", timed("")) == click((14, 70))  # the hour segment
    assert solve("enter-time", timed(""), (click((14, 70)),)) == type_text("0407P")
    assert (
        clicked(timed("16:07"), solve("enter-time", timed("16:07"), (click((14, 70)), type_text("0407P"))))
        == "Submit"
    )


def test_an_email_is_found_by_its_sender_then_acted_on() -> None:
    def inbox(utterance: str, said: tuple[str, ...]) -> Snapshot:
        return page(utterance,
                    el("div", cls="email-thread", box=(2, 73, 155, 42)), el("div", cls="email-sender", own="Darcy", parent=0),
                    el("span", cls="trash", id="trash-darcy", parent=0, box=(132, 80, 12, 12)),
                    el("div", cls="email-thread", box=(2, 114, 155, 42)), el("div", cls="email-sender", own="Fidela", parent=3, box=(7, 116, 98, 12)),
                    el("span", cls="trash", id="trash-fidela", parent=3, box=(132, 122, 12, 12)),
                    el("span", cls="star", id="star-fidela", parent=3, box=(118, 122, 12, 12)), bold=said)  # fmt: skip

    delete = inbox("Find the email by Fidela and click the trash icon to delete it.", ("Fidela",))
    assert clicked(delete, solve("email-inbox-delete", delete)) == "trash-fidela"
    reply = inbox('Find the email by Fidela and reply to them with the text "Ok".', ("Fidela", "Ok"))
    assert clicked(reply, solve("email-inbox-reply", reply)) == "Fidela"  # the email opened first
    form = page('Find the email by Fidela and reply to them with the text "Ok".', el("textarea", id="reply-text", focused=True),
                el("span", id="send-reply", box=(100, 60, 12, 12)), bold=("Fidela", "Ok"))  # fmt: skip
    assert solve("email-inbox-reply", form) == type_text("Ok")
