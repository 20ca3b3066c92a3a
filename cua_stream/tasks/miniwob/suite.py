"""The suite: which MiniWoB++ tasks become computer-1 tasks, which are left out and why, and what each one
is (its one-line description, whether the package marks it nondeterministic or its reward continuous).

Read from the installed package's source without importing it (that would import gymnasium, which the
setup does not install): ``registration.py`` is parsed for its ``register(id=..., entry_point=...,
nondeterministic=...)`` calls, and ``envs/miniwob_envs.py`` for each environment class's docstring. The
decisions themselves (``plan_suite``) are pure.

Left out: the pages computer-1 cannot play fairly, because a turn takes seconds and they score what
happens in between (real time), the pages the package does not register, and FlightWoB (``flight.*``:
whole airline sites in a 375x667 phone frame, not MiniWoB's 160x210 task area). ``LEFT_OUT`` gives each
its reason; ``cua-stream tasks export miniwob`` prints them, docs/miniwob.md lists them.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cua_stream.tasks.miniwob.package import Installed

LEFT_OUT: Mapping[str, str] = {
    "stock-market": "real time: the price is redrawn every 100 ms and the task is to buy below a level, "
    "so a turn of seconds decides by luck",
    "button-delay": "not registered; timed: wait a given number of seconds between two clicks, measured "
    "by the page's clock (turn latency decides)",
    "chase-circle": "not registered; real time: keep the mouse inside a moving circle",
    "hover-shape": "not registered; real time: scored continuously while the mouse stays on a square "
    "that keeps moving",
    "moving-items": "not registered; real time: click circles while they move",
    "simon-says": "not registered; real time: a sequence flashed on a timer, to be repeated",
}
"""Pages left out, each with its reason (registered or not)."""
FLIGHT_PREFIX = "flight."
FLIGHT_REASON = "FlightWoB: a whole airline site in a 375x667 frame, not a 160x210 MiniWoB++ task"
UNREGISTERED_REASON = "not registered in the package's registration.py"
_REGISTERED_ID = re.compile(r"miniwob/(?P<name>.+)-v(?P<v>\d+)$")


@dataclass(frozen=True)
class Registration:
    """One ``register(...)`` call of the package's ``registration.py``."""

    name: str
    """The task, as in its id ``miniwob/<name>-v1`` and its page ``html/miniwob/<name>.html``."""
    entry_point: str
    nondeterministic: str | None = None
    """The package's reason when it marks the task nondeterministic (its comment), else None."""


@dataclass(frozen=True)
class Doc:
    """What an environment class's docstring says of its task."""

    description: str
    partial: bool = False
    """Its reward may lie between -1 and 1 (a partial reward)."""
    continuous: bool = False
    """Its reward is continuous: the package advises a threshold (``get_thresholded_reward``)."""


@dataclass(frozen=True)
class Task:
    """A task of the suite: exported as a computer-1 task."""

    name: str
    description: str
    nondeterministic: str | None = None
    partial: bool = False
    continuous: bool = False


@dataclass(frozen=True)
class Suite:
    version: str
    tasks: tuple[Task, ...]
    left_out: tuple[tuple[str, str], ...]
    """(page or registered name, reason), by name."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tasks)

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def why_left_out(self, name: str) -> str | None:
        return dict(self.left_out).get(name)


# -- pure -----------------------------------------------------------------------------------------------


def plan_suite(
    version: str, registrations: Iterable[Registration], pages: Iterable[str], docs: Mapping[str, Doc]
) -> Suite:
    """The suite of a package: its registered tasks with a page, less ``LEFT_OUT`` and FlightWoB; every
    other page and registration is left out with its reason. ``docs`` by entry point's class name."""
    pages = set(pages)
    tasks: list[Task] = []
    left: dict[str, str] = {}
    registered = {r.name: r for r in registrations}
    for name, reg in sorted(registered.items()):
        if name.startswith(FLIGHT_PREFIX):
            left[name] = FLIGHT_REASON
        elif name in LEFT_OUT:
            left[name] = LEFT_OUT[name]
        elif name not in pages:
            left[name] = "registered, but the package has no page for it"
        else:
            doc = docs.get(reg.entry_point.rpartition(":")[2], Doc(description=""))
            tasks.append(Task(name, doc.description, reg.nondeterministic, doc.partial, doc.continuous))
    for page in sorted(pages - set(registered)):
        left[page] = LEFT_OUT.get(page, UNREGISTERED_REASON)
    return Suite(version, tuple(tasks), tuple(sorted(left.items())))


def parse_registrations(source: str) -> list[Registration]:
    """The ``register(id=..., entry_point=..., nondeterministic=...)`` calls of ``registration.py``; a
    nondeterministic task's reason is the comment on its ``nondeterministic=`` line."""
    lines = source.splitlines()
    found: list[Registration] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register"):
            continue
        kw = {k.arg: k for k in node.keywords if k.arg}
        ident = _literal(kw.get("id"))
        match = _REGISTERED_ID.match(ident) if isinstance(ident, str) else None
        if match is None:
            continue
        why = None
        flag = kw.get("nondeterministic")
        if flag is not None and _literal(flag) is True:
            why = lines[flag.lineno - 1].partition("#")[2].strip() or "marked nondeterministic"
        entry = _literal(kw.get("entry_point"))
        found.append(Registration(match["name"], entry if isinstance(entry, str) else "", why))
    return found


def parse_docs(source: str) -> dict[str, Doc]:
    """Each environment class's ``Doc``, by class name, from its docstring's ``## Description`` and
    ``## Additional notes``."""
    out: dict[str, Doc] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        text = ast.get_docstring(node) or ""
        section = text.partition("## Description")[2].split("##")[0]
        description = " ".join(section.strip().split("\n\n")[0].split())
        notes = text.partition("## Additional notes")[2]
        out[node.name] = Doc(
            description, partial="Partial reward" in notes, continuous="get_thresholded_reward" in notes
        )
    return out


def _literal(keyword: ast.keyword | None) -> object:
    if keyword is None:
        return None
    try:
        return ast.literal_eval(keyword.value)
    except ValueError:
        return None


# -- the installed package ------------------------------------------------------------------------------


@functools.cache
def suite_of(package: Installed) -> Suite:
    """The suite of the installed ``package`` (read once per process)."""
    root = package.root
    pages = [p.stem for p in (package.html / "miniwob").glob("*.html")]
    registrations = parse_registrations(_read(root / "registration.py"))
    docs = parse_docs(_read(root / "envs" / "miniwob_envs.py"))
    return plan_suite(package.version, registrations, pages, docs)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def installed_suite() -> Suite:
    """The suite of the installed package (MiniwobMissing naming the setup step when there is none)."""
    from cua_stream.tasks.miniwob.package import installed

    return suite_of(installed())
