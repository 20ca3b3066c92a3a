"""The bundled tasks' pages, generated from a seed. Pure: a layout is a function of (task, seed).

Every task is MiniWoB-style: the page's banner says what to do (so one static ``instruction.md`` serves
every seed, and a policy must read the screen), and the layout, labels and the goal are drawn from the
seed (so coordinates cannot be memorized). Interactive elements have distinct saturated colors from a
shuffled palette: they look like ordinary colored controls to a policy, and they let the scripted
oracle find its target on the screenshot by color, the way it knows the goal (from the seed).

``click-test`` is the exception that proves the loop: MiniWoB's simplest task, one big button always
under the page's centre, so a policy needs no eyes — its reply format and action sequence (click, then
done) are all there is to learn, and a learning curve on it shows what GRPO does on its own.

``click-box`` is the step between: one colored box among grey ones, in a random cell of a 3x3 grid, and
nothing to read (the banner is the same on every layout). No fixed click solves it (the best hits about
one layout in nine), yet a policy that can *find* a salient patch can: it asks for localisation, not
reading, which is what a small vision tower trained from scratch can plausibly learn in an hour on CPU.

The page reports what the user did to the task's server (``POST /state``); the verifier reads it back.
"""

from __future__ import annotations

import html
import json
import random
from dataclasses import dataclass, field

TASKS = (
    "click-test",
    "click-button",
    "fill-form",
    "read-value",
    "follow-link",
    "choose-option",
    "sign-up",
    "click-box",  # last: the demo and the loops that take the tasks in turn start with the first ones
)
ONE_CLICK_TASKS = ("click-test", "click-button", "click-box")
"""The tasks whose verdict the first click on a button decides (click-test and click-box also ask for a
``done``): their oracle clicks the target, and their blind baseline is the best fixed click."""

PALETTE: tuple[tuple[int, int, int], ...] = (
    (210, 40, 40),
    (30, 160, 60),
    (235, 130, 20),
    (140, 50, 200),
    (215, 40, 160),
    (20, 150, 150),
    (140, 85, 30),
    (120, 130, 10),
)
"""Saturated colors unlike Chromium's own greys and blues (the oracle looks for them on screen)."""

WORDS = (
    "Apple", "Birch", "Cedar", "Delta", "Ember", "Falcon", "Garnet", "Harbor", "Iris", "Juniper",
    "Kestrel", "Lotus", "Maple", "Nova", "Opal", "Pepper", "Quartz", "Raven", "Sierra", "Tulip",
)  # fmt: skip

PAGE_W, PAGE_H = 600, 330
"""The area elements are placed in (page pixels): fits a 800x600 desktop's Chromium viewport."""
CELL_W, CELL_H = 200, 66
BANNER_H = 60
BIG_W, BIG_H = 280, 100
"""click-test's button."""
BOX_CELL_W, BOX_CELL_H = 200, 110
"""click-box's 3x3 grid under the banner (600x330 page pixels)."""
BOX_W, BOX_H = 150, 80
BOX_JITTER_X, BOX_JITTER_Y = 40, 24
"""A box moves this far inside its cell (box + jitter < cell: boxes never touch)."""
GREYS: tuple[tuple[int, int, int], ...] = ((125, 125, 125), (150, 150, 150), (175, 175, 175))
"""click-box's distractors: unsaturated, each its own shade (the oracle tells elements apart by color)."""


@dataclass(frozen=True)
class Element:
    id: str
    label: str
    x: int
    y: int
    color: tuple[int, int, int]
    kind: str = "button"
    """button | input | link | option | toggle | text | box (a button without a label)"""
    w: int = 160
    h: int = 40


@dataclass(frozen=True)
class Layout:
    task: str
    seed: int
    goal: str
    """What the banner asks, in words."""
    answer: str
    """The value the goal names (the label to click, the text to type, the code to report, ...)."""
    elements: tuple[Element, ...]
    subpages: dict[str, tuple[Element, ...]] = field(default_factory=dict)

    def element(self, id: str, page: str = "") -> Element:
        for e in self.subpages.get(page, ()) if page else self.elements:
            if e.id == id:
                return e
        raise KeyError(f"{self.task}: no element {id!r} on page {page or '/'!r}")


def _cells(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """``n`` distinct grid cells (top-left page pixels, jittered) under the banner."""
    cols, rows = PAGE_W // CELL_W, PAGE_H // CELL_H
    picked = rng.sample([(c, r) for c in range(cols) for r in range(rows)], n)
    return [
        (c * CELL_W + rng.randrange(0, 30), BANNER_H + r * CELL_H + rng.randrange(0, 12)) for c, r in picked
    ]


def layout(task: str, seed: int) -> Layout:
    if task not in TASKS:
        raise ValueError(f"unknown bundled task {task!r}; known: {', '.join(TASKS)}")
    rng = random.Random(f"{task}:{seed}")
    colors = list(PALETTE)
    rng.shuffle(colors)
    words = rng.sample(WORDS, 8)
    if task == "click-test":
        # jittered, but always covering the page's centre (300, 225): a fixed click can solve it
        x, y = rng.randrange(100, 221), rng.randrange(130, 191)
        button = Element("b0", words[0], x, y, colors[0], w=BIG_W, h=BIG_H)
        return Layout(task, seed, f"Click the {words[0]} button.", words[0], (button,))
    if task == "click-button":
        cells = _cells(rng, 4)
        els = tuple(Element(f"b{i}", words[i], *cells[i], colors[i]) for i in range(4))
        target = rng.choice(els).label
        return Layout(task, seed, f"Click the button labelled {target}.", target, els)
    if task == "click-box":
        return _click_box(rng, seed, colors[0])
    if task == "fill-form":
        cells = _cells(rng, 2)
        text = f"{words[0].lower()}{rng.randrange(10, 99)}"
        els = (
            Element("input", "", *cells[0], colors[0], "input"),
            Element("submit", "Submit", *cells[1], colors[1]),
        )
        return Layout(task, seed, f"Type {text} in the text field, then press Submit.", text, els)
    if task == "read-value":
        (cell,) = _cells(rng, 1)
        code = str(rng.randrange(1000, 9999))
        els = (Element("code", f"Your code is {code}", *cell, colors[0], "text"),)
        return Layout(task, seed, "Read the code on this page and give it as your final answer.", code, els)
    if task == "follow-link":
        cells = _cells(rng, 3)
        els = tuple(Element(f"l{i}", words[i], *cells[i], colors[i], "link") for i in range(3))
        target = rng.choice(els).label
        subpages = {
            e.label: (Element("confirm", "Confirm", *_cells(rng, 1)[0], colors[3 + i]),)
            for i, e in enumerate(els)
        }
        goal = f"Open the {target} page, then press its Confirm button."
        return Layout(task, seed, goal, target, els, subpages)
    if task == "choose-option":
        cells = _cells(rng, 2)
        options = words[:3]
        target = rng.choice(options)
        els = (
            Element("menu", "Choose...", *cells[0], colors[0]),
            *(
                Element(f"o{i}", w, cells[0][0], cells[0][1] + 50 * (i + 1), colors[2 + i], "option")
                for i, w in enumerate(options)
            ),
            Element("submit", "Submit", *cells[1], colors[1]),
        )
        # the options drop down under the menu: keep the submit button out of their way
        if abs(cells[1][0] - cells[0][0]) < CELL_W and cells[1][1] > cells[0][1]:
            els = (
                *els[:-1],
                Element("submit", "Submit", (cells[0][0] + CELL_W) % PAGE_W, cells[1][1], colors[1]),
            )
        return Layout(task, seed, f"Choose {target} from the menu, then press Submit.", target, els)
    # sign-up: a multi-step form
    cells = _cells(rng, 3)
    text = f"{words[1].lower()}{rng.randrange(10, 99)}"
    els = (
        Element("input", "", *cells[0], colors[0], "input"),
        Element("agree", "I agree", *cells[1], colors[1], "toggle"),
        Element("submit", "Sign up", *cells[2], colors[2]),
    )
    goal = f"Type {text} in the text field, tick I agree, then press Sign up."
    return Layout(task, seed, goal, text, els)


def _click_box(rng: random.Random, seed: int, color: tuple[int, int, int]) -> Layout:
    """One box of ``color`` (the target, ``answer``) and three grey ones in 4 of the 9 cells, jittered."""
    cells = rng.sample([(c, r) for c in range(PAGE_W // BOX_CELL_W) for r in range(PAGE_H // BOX_CELL_H)], 4)
    els = tuple(
        Element(
            "target" if i == 0 else f"d{i}",
            "target" if i == 0 else f"d{i}",
            c * BOX_CELL_W + rng.randrange(0, BOX_JITTER_X + 1),
            BANNER_H + r * BOX_CELL_H + rng.randrange(0, BOX_JITTER_Y + 1),
            color if i == 0 else GREYS[i - 1],
            "box",
            BOX_W,
            BOX_H,
        )
        for i, (c, r) in enumerate(cells)
    )
    return Layout("click-box", seed, "Click the colored box, then finish with done.", "target", els)


def _style(e: Element) -> str:
    r, g, b = e.color
    return (
        f"position:absolute;left:{e.x}px;top:{e.y}px;width:{e.w}px;height:{e.h}px;background:rgb({r},{g},{b});"
        "color:#fff;border:none;font:bold 16px sans-serif;"
    )


def _element_html(e: Element) -> str:
    label = html.escape(e.label)
    if e.kind == "input":
        return (
            f'<input id="{e.id}" style="{_style(e)}color:#000;background:#fff;border:6px solid rgb{e.color}">'
        )
    if e.kind == "link":
        return f'<a id="{e.id}" href="/page/{label}" style="{_style(e)}display:block;line-height:40px;text-align:center">{label}</a>'
    if e.kind == "text":
        return f'<div id="{e.id}" style="{_style(e)}width:220px;line-height:40px;text-align:center">{label}</div>'
    if e.kind == "box":  # nothing to read: the page reports the box's id
        return f'<button id="{e.id}" data-kind="box" style="{_style(e)}"></button>'
    hidden = "display:none;" if e.kind == "option" else ""
    return f'<button id="{e.id}" data-kind="{e.kind}" style="{_style(e)}{hidden}">{label}</button>'


_SCRIPT = """
function report(ev) {
  fetch('/state', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(ev)});
}
// after the first frame is drawn (the next animation frame comes after a paint): the ready probe's signal
requestAnimationFrame(() => requestAnimationFrame(() => fetch('/painted', {method: 'POST'})));
let choice = null, agreed = false;
for (const b of document.querySelectorAll('button')) {
  b.addEventListener('click', () => {
    const kind = b.dataset.kind, input = document.getElementById('input');
    if (TASK === 'click-button' || TASK === 'click-test') report({click: b.textContent});
    else if (TASK === 'click-box') report({click: b.id});
    else if (b.id === 'confirm') report({confirm: PAGE});
    else if (b.id === 'menu') document.querySelectorAll('[data-kind=option]').forEach(o => o.style.display = 'block');
    else if (kind === 'option') { choice = b.textContent; document.getElementById('menu').textContent = choice;
      document.querySelectorAll('[data-kind=option]').forEach(o => o.style.display = 'none'); }
    else if (kind === 'toggle') { agreed = !agreed; b.textContent = (agreed ? '\\u2611 ' : '') + 'I agree'; }
    else if (b.id === 'submit') report({submit: input ? input.value : choice, agreed: agreed});
  });
}
"""


def render(lay: Layout, page: str = "") -> str:
    """The HTML of the task's main page, or of subpage ``page`` (follow-link)."""
    elements = lay.subpages[page] if page else lay.elements
    banner = f"{page} page" if page else lay.goal
    body = "".join(_element_html(e) for e in elements)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>cua task</title></head>"
        "<body style='margin:0;background:#f4f4f4'>"
        f"<div style='height:{BANNER_H - 10}px;font:20px sans-serif;padding:8px'>{html.escape(banner)}</div>"
        f"{body}<script>const TASK = {json.dumps(lay.task)}, PAGE = {json.dumps(page)};{_SCRIPT}</script>"
        "</body></html>"
    )
