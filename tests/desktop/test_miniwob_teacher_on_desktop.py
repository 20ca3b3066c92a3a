"""The MiniWoB++ teacher through the real path on the local desktop: ``cua-stream policies``'s app (its
``oracle`` route, ``/policies/oracle/miniwob/<name>/<seed>/v1``) is the model of real Harbor computer-1
trials, and solves click, type and multi-step tasks there, scored by the page's own raw reward. It
reads the page only on its shadow page and acts only through computer-1's actions (xdotool on the
episode's Chromium), placed where the screenshot shows the task's frame."""

from __future__ import annotations

from pathlib import Path

import pytest

from cua_stream.tasks.policy_server import create_app
from tests.desktop.miniwob_actor import trials

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

DESKTOP = (800, 600)
TAUGHT = (("click-checkboxes", 31), ("enter-text", 32), ("click-tab-2", 33), ("login-user", 34))
"""Several clicks in a row; focus then type then submit; a tab opened to find a link; two fields."""


async def test_the_teacher_solves_tasks_through_computer_1_on_the_desktop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = await trials(create_app(), "policies/oracle", list(TAUGHT), tmp_path, monkeypatch, DESKTOP,
                            turns=15)  # fmt: skip
    print({name: (o.rewards, o.n_turns, o.early_termination_reason) for name, o in outcomes.items()})
    for name, _ in TAUGHT:
        o = outcomes[name]
        assert o.exception is None and o.early_termination_reason == "task_complete", (name, o.exception)
        assert o.rewards == {"reward": 1.0, "raw": 1.0}, name
