"""MiniWoB++ (PyPI ``miniwob``, Farama Foundation, MIT) as Harbor computer-1 tasks, none written by hand.

The package is installed by ``scripts/setup.sh`` (pinned with its hash in ``requirements.txt``, without
its dependencies) and never imported: its ``html/`` is all cua-stream uses. The parts:

- ``package``: where the installed package's ``html/`` is, and its version (in the episode too);
- ``suite``: the registered tasks (read from the package's ``registration.py``), the ones left out and
  why, and each task's one-line description (host side);
- ``wrapper`` and ``site``: the page an episode shows (the task's own page, unmodified, in a zoomed
  same-origin frame that seeds it, starts it and reports its reward once) and the HTTP handler
  ``cua_stream.tasks.server`` serves it with (in the episode, standard library only);
- ``verdict``: the page's raw reward → success (pure, in the episode);
- ``export`` and ``names``: task directories from one template, and ``--tasks miniwob`` /
  ``miniwob/click-*`` resolved to them (host side);
- ``teacher``: the privileged scripted policy of demonstrations (the ``oracle`` of these tasks), which
  reads the page on a ``shadow`` page of its own (``dom``), decides with per-task ``solvers`` (pure) and
  acts through computer-1's actions placed on the screenshot (``screen``, ``moves``).

Task names are ``miniwob/<name>``, ``<name>`` as the package registers it (``miniwob/<name>-v1``).
"""

from __future__ import annotations

PREFIX = "miniwob/"
SUITE = "miniwob"
"""``--tasks miniwob``: every task of the suite."""


def is_miniwob(name: str) -> bool:
    """Whether ``name`` names a MiniWoB++ task (``miniwob/<name>``)."""
    return name.startswith(PREFIX)
