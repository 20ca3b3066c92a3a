"""MiniWoB++ tasks through real Harbor computer-1 trials on the local desktop: named ``miniwob/<name>``,
exported on demand by the producer, served unmodified in the episode's namespace, played by a scripted
actor that acts only through computer-1's actions (xdotool on the episode's Chromium), and scored by the
page's own raw reward.

The coordinate tasks (circle-center, find-midpoint) and the drags (drag-box's jQuery UI draggable,
use-slider's slider) show clicks land where the screenshot shows: the actor takes the frame's corner from
the screenshot and the targets from the task's DOM, and the desktop's episode must earn exactly the raw
reward the same plan earns in a DevTools-driven browser at the wrapper's geometry. A policy that ends at
once scores 0 with the page's reason, never hangs; and the agent cannot forge the page's report by
running a ``javascript:`` URL in the task's page (the desktop's Chromium blocks it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn

from cua_stream.config import Secret
from cua_stream.events import OutcomeEvent, TaskRef, WorkRequest
from cua_stream.tasks.miniwob.wrapper import FRAME_TOP, TASK_W, ZOOM
from producers.config import ProducerConfig
from producers.episode import EpisodeRun
from producers.trial import TrialRunner
from tests.conftest import free_port
from tests.desktop.miniwob_actor import Seen, actor_app, plan, replay
from tests.integration.browser import chromium
from tests.integration.gateway_servers import serving

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="per-episode namespaces need root (CI runs as root)"),
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

DESKTOP = (800, 600)
SEED = 7
SOLVED = ("click-test", "circle-center", "find-midpoint", "drag-box", "use-slider")
FORGE = "javascript:frames[0].core.endEpisode(1,false,'forged')"
"""What an agent would type to score itself, were script allowed in the address bar: the page's own
endEpisode, called with a reward of 1 (the wrapper would report it as the page's)."""


def episode(port: int, name: str, seed: int) -> EpisodeRun:
    work = WorkRequest(
        run_id="miniwob", group_id=f"g-{name}", episode_id=f"{name}-{seed}", task=TaskRef(name=f"miniwob/{name}"),
        sample_index=0, group_size=1, policy_version=0, created_at=time.time(),
    )  # fmt: skip
    return EpisodeRun(
        work=work, attempt=1, seed=seed, session_url=f"http://127.0.0.1:{port}/actor/{name}/{seed}/v1",
        session_key=Secret("actor-key"), context_length=32768,
    )  # fmt: skip


async def play(
    plans: dict[tuple[str, int], list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, OutcomeEvent], dict[tuple[str, int], Seen]]:
    """One episode per plan on the local desktop, three at a time."""
    monkeypatch.setenv("CUA_CACHE_DIR", str(tmp_path / "cache"))  # the producer's on-demand export lands here
    seen: dict[tuple[str, int], Seen] = {}
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(actor_app(plans, DESKTOP, seen), port=port, log_level="warning"))
    config = ProducerConfig(trials_dir=str(tmp_path / "trials"), max_turns=8,
                            desktop_width=DESKTOP[0], desktop_height=DESKTOP[1])  # fmt: skip
    runner = TrialRunner(config)
    outcomes: dict[str, OutcomeEvent] = {}
    limit = anyio.CapacityLimiter(3)

    async def one(name: str, seed: int) -> None:
        async with limit:
            outcomes[name] = (await runner.run(episode(port, name, seed))).outcome

    with serving(server), anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for name, seed in plans:
                tg.start_soon(one, name, seed)
    return outcomes, seen


async def test_clicks_and_drags_land_where_the_screenshot_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans: dict[tuple[str, int], list[dict[str, Any]]] = {}
    expected: dict[str, float | None] = {}
    async with chromium("about:blank", size=DESKTOP) as shadow:
        for name in SOLVED:
            plans[(name, SEED)] = await plan(shadow, name, SEED)
            expected[name] = await replay(shadow, name, SEED, plans[(name, SEED)])
    outcomes, seen = await play(plans, tmp_path, monkeypatch)
    print({name: (o.rewards, expected[name], seen.get((name, SEED))) for name, o in outcomes.items()})
    for name in SOLVED:
        o = outcomes[name]
        assert o.exception is None and o.early_termination_reason == "task_complete", (name, o.exception)
        assert o.rewards is not None and o.rewards["raw"] == pytest.approx(expected[name], abs=1e-9), name
        assert o.rewards["reward"] == float(o.rewards["raw"] >= 1.0)  # binary by default
        # the frame is where the wrapper puts it: centred, FRAME_TOP under the viewport's top, zoomed
        frame = seen[(name, SEED)]
        assert (frame.left, frame.width) == ((DESKTOP[0] - ZOOM * TASK_W) // 2, ZOOM * TASK_W)
        assert frame.top > FRAME_TOP  # under Chromium's tab strip and toolbar
    assert all(expected[n] == 1.0 for n in ("click-test", "drag-box", "use-slider"))
    assert all(expected[n] is not None and expected[n] >= 0.9 for n in ("circle-center", "find-midpoint"))  # type: ignore[operator]
    assert (tmp_path / "cache" / "miniwob").is_dir()  # exported on demand, by name


async def test_an_episode_that_never_ends_scores_zero_and_a_javascript_url_forges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = {("click-test", SEED): [], ("enter-text", SEED): [{"navigate": FORGE}]}
    outcomes, _ = await play(plans, tmp_path, monkeypatch)
    for name, o in outcomes.items():
        assert o.exception is None and o.early_termination_reason == "task_complete", (name, o.exception)
        assert o.rewards == {"reward": 0.0}, name  # no report from the page: no raw reward
    said = {
        name: (tmp_path / "trials" / f"{name}-{SEED}.1" / "verifier" / "test-stdout.txt").read_text()
        for name in outcomes
    }
    assert "the page never ended the episode" in said["click-test"]
    assert "forged" not in said["enter-text"], said["enter-text"]
