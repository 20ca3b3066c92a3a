"""Every bundled task through a real Harbor Trial on the local desktop: the scripted oracle (acting on
the screenshots computer-1 sends it) reaches reward 1 on each, acting on its first turn (the page is
drawn by then), and the do-nothing policy scores 0 on
each; all the tasks' episodes of a policy run side by side."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import uvicorn

from cua_stream.events import OutcomeEvent
from cua_stream.scoring import classify
from cua_stream.tasks import TASKS
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


async def run_all(policy: str, tmp_path: Path) -> dict[str, OutcomeEvent]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    runner = TrialRunner(ProducerConfig(trials_dir=str(tmp_path / "trials"), max_turns=10))
    outcomes: dict[str, OutcomeEvent] = {}

    async def one(task: str, seed: int) -> None:
        episode = scripted_episode(port, policy, task, seed, run_id="tasks", episode_id=f"{task}-{policy}")
        outcomes[task] = (await runner.run(episode)).outcome

    with serving(server), anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for i, task in enumerate(TASKS):
                tg.start_soon(one, task, 1000 + 37 * i)
    return outcomes


async def test_the_oracle_solves_every_bundled_task(tmp_path: Path) -> None:
    outcomes = await run_all("oracle", tmp_path)
    for task, o in outcomes.items():
        assert o.exception is None, (task, o.exception)
        assert o.rewards == {"reward": 1.0}, task
        assert o.early_termination_reason == "task_complete"
        assert classify(o)[1].value == 1.0  # type: ignore[union-attr]
        # the task's ready probe held the first screenshot until the page was drawn: the oracle, which
        # waits whenever its element is not on screen, acted on its first turn
        assert first_action(tmp_path / "trials" / f"{task}-oracle.1") != "wait", task
    assert set(outcomes) == set(TASKS)


async def test_doing_nothing_scores_zero_on_every_bundled_task(tmp_path: Path) -> None:
    outcomes = await run_all("nothing", tmp_path)
    assert {task: o.rewards for task, o in outcomes.items()} == {task: {"reward": 0.0} for task in TASKS}
    assert all(o.exception is None and o.agent_started for o in outcomes.values())
