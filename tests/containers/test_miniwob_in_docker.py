"""MiniWoB++ tasks in Harbor's docker environment: each episode a container of the tasks image (its
MiniWoB++ pages are the installed package's html/, copied in), its task named ``miniwob/<name>`` and
exported on demand by the producer. The scripted actor of the desktop tests acts through computer-1 in
the container, and the coordinate and drag tasks earn exactly the raw reward their plan earns in a
DevTools-driven browser; a policy that ends at once scores 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cua_stream.containers.dockerd import DockerHome
from producers.environments import OWNER
from tests.containers.conftest import containers
from tests.desktop.miniwob_actor import plan, play, replay
from tests.integration.browser import chromium

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.containers,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

DESKTOP = (800, 600)
SEED = 11
SOLVED = ("circle-center", "find-midpoint", "drag-box", "use-slider")


async def test_miniwob_tasks_run_in_docker_with_clicks_and_drags_where_the_screenshot_shows(
    docker_engine: DockerHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans: dict[tuple[str, int], list[dict[str, Any]]] = {("click-test", SEED): []}  # done at once
    expected: dict[str, float | None] = {}
    async with chromium("about:blank", size=DESKTOP) as shadow:
        for name in SOLVED:
            plans[(name, SEED)] = await plan(shadow, name, SEED)
            expected[name] = await replay(shadow, name, SEED, plans[(name, SEED)])
    outcomes, seen = await play(plans, tmp_path, monkeypatch, DESKTOP, environment="docker")
    print({name: (o.rewards, expected.get(name), seen.get((name, SEED))) for name, o in outcomes.items()})
    for name in SOLVED:
        o = outcomes[name]
        assert o.exception is None and o.early_termination_reason == "task_complete", (name, o.exception)
        assert o.rewards is not None and o.rewards["raw"] == pytest.approx(expected[name], abs=1e-9), name
        assert seen[(name, SEED)].width == 320  # the frame at zoom 2 on the container's 800x600 screen
    assert outcomes["click-test"].rewards == {"reward": 0.0}  # the page never ended its episode
    assert not containers(OWNER)  # every episode's container stopped and removed
