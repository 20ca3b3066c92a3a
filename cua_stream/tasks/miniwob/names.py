"""``--tasks miniwob`` (the whole suite), ``miniwob/click-*`` (a glob on task names) and ``miniwob/<name>``:
the task names they stand for. Pure, given the suite; a name the suite does not have is an UnknownTask
naming the closest ones (or, for a task left out, why)."""

from __future__ import annotations

import difflib
import fnmatch

from cua_stream.errors import UnknownTask
from cua_stream.tasks.miniwob import PREFIX, SUITE
from cua_stream.tasks.miniwob.suite import Suite

CLOSEST = 4


def names_of(spec: str, suite: Suite) -> list[str]:
    """The ``miniwob/<name>`` names ``spec`` stands for, in name order: ``miniwob`` every task of the
    suite, a glob (``*``, ``?``, ``[...]``) the tasks it matches, else the one task it names."""
    if spec == SUITE:
        return [PREFIX + n for n in suite.names]
    pattern = spec.removeprefix(PREFIX)
    if any(c in pattern for c in "*?["):
        matched = [PREFIX + n for n in suite.names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise UnknownTask(f"{spec} matches no MiniWoB++ task of the suite (cua-stream tasks export "
                              "miniwob DIR lists them)")  # fmt: skip
        return matched
    if pattern not in suite.names:
        raise unknown(spec, suite)
    return [PREFIX + pattern]


def unknown(spec: str, suite: Suite) -> UnknownTask:
    """The error for ``spec``, a name the suite does not have: why it was left out, or the closest
    names."""
    name = spec.removeprefix(PREFIX)
    why = suite.why_left_out(name)
    if why is not None:
        return UnknownTask(f"{spec} is left out of the MiniWoB++ suite: {why}")
    close = difflib.get_close_matches(name, suite.names, n=CLOSEST, cutoff=0.5)
    hint = f"; closest: {', '.join(PREFIX + c for c in close)}" if close else ""
    return UnknownTask(f"{spec} is not a MiniWoB++ task of the suite (MiniWoB++ {suite.version}){hint}")
