"""The teacher's per-task solvers: each reads a ``Snapshot`` of the task page (the banner's utterance and
the drawn elements) and the moves made so far, and gives the next move, in the task page's terms. Pure:
the teacher replays them on its shadow page to know where the episode is, so the same page and history
always give the same move."""

from __future__ import annotations

from collections.abc import Mapping

from cua_stream.tasks.miniwob.solvers import clicks, forms, pointing, widgets
from cua_stream.tasks.miniwob.solvers.common import History, Solver

SOLVERS: Mapping[str, Solver] = {**clicks.SOLVERS, **forms.SOLVERS, **widgets.SOLVERS, **pointing.SOLVERS}
"""Task name (without ``miniwob/``) → its solver."""

__all__ = ["SOLVERS", "History", "Solver"]
