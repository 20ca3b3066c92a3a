"""A navigation the browser loses is retried: computer-1 types ``start_url`` into the address bar once;
when the page is not there to load (here its server comes up only after the browser tried it, as a
typed URL lost by a busy desktop also leaves the tab without the page), the agent opens it again while
the ready probe fails, and the oracle still acts on the drawn page on its first turn. (The task is a copy under
/tmp, which the episode's private /tmp once hid from its start script.)"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import anyio
import pytest
import uvicorn

from cua_stream.tasks import BUNDLED_DIR
from cua_stream.tasks.policy_server import create_app
from producers.config import ProducerConfig
from producers.trial import TrialRunner
from tests.conftest import free_port
from tests.desktop.scripted import first_action, scripted_episode
from tests.integration.gateway_servers import serving

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

LATE_START = """#!/bin/bash
# The page's server starts only once the browser has tried the page (its tab names the URL, or shows
# Chromium's error page): computer-1's one typed navigation finds nothing, however long its start took.
(until curl -s --max-time 2 http://127.0.0.1:9222/json/list | grep -Eq '127\\.0\\.0\\.1:8000|chrome-error'; do
     sleep 0.2
 done
 exec "${{CUA_PYTHON:-python3}}" -m cua_stream.tasks.server --task click-button --seed "$CUA_TASK_SEED" \\
     --port 8000 >/tmp/task-server.log 2>&1) &
exit 0
"""


def late_task(root: Path) -> Path:
    shutil.copytree(BUNDLED_DIR / "click-button", root)
    (root / "environment" / "start.sh").write_text(LATE_START.format())
    return root


async def test_the_agent_navigates_again_while_the_page_is_not_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    task = late_task(tmp_path / "click-button-late")
    port, seed = free_port(), 4242
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    runner = TrialRunner(ProducerConfig(trials_dir=str(tmp_path / "trials"), max_turns=4))
    episode = scripted_episode(
        port, "oracle", "click-button", seed, run_id="ready", episode_id="late-oracle", task_path=task
    )
    with serving(server), anyio.fail_after(180):
        outcome = (await runner.run(episode)).outcome

    trial = tmp_path / "trials" / "late-oracle.1"
    assert "navigating to start_url again" in caplog.text
    assert outcome.exception is None, outcome.exception
    assert outcome.rewards == {"reward": 1.0}
    assert first_action(trial) != "wait"  # the first screenshot showed the page, not an error page
