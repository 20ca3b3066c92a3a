"""MiniWoB++ tasks through real Harbor computer-1 trials on the local desktop: named ``miniwob/<name>``,
exported on demand by the producer, served unmodified in the episode's namespace, played by a scripted
actor that acts only through computer-1's actions (xdotool on the episode's Chromium), and scored by the
page's own raw reward.

The coordinate tasks (circle-center, find-midpoint) and the drags (drag-box's jQuery UI draggable,
use-slider's slider) show clicks land where the screenshot shows: the actor takes the frame's corner from
the screenshot and the targets from the task's DOM, and the desktop's episode must earn exactly the raw
reward the same plan earns in a DevTools-driven browser at the wrapper's geometry. A policy that ends at
once, or whose page never shows (the ready probe gives up, the agent finds nothing to do), scores 0
with the page's reason and never hangs; and the agent cannot forge the page's report by
running a ``javascript:`` URL in the task's page (the desktop's Chromium blocks it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cua_stream.tasks.miniwob.export import export
from cua_stream.tasks.miniwob.suite import Suite, installed_suite
from cua_stream.tasks.miniwob.wrapper import FRAME_TOP, TASK_W, ZOOM
from tests.desktop.miniwob_actor import plan, play, replay
from tests.integration.browser import chromium

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

DESKTOP = (800, 600)
SEED = 7
SOLVED = ("click-test", "circle-center", "find-midpoint", "drag-box", "use-slider")
FORGE = "javascript:frames[0].core.endEpisode(1,false,'forged')"
"""What an agent would type to score itself, were script allowed in the address bar: the page's own
endEpisode, called with a reward of 1 (the wrapper would report it as the page's)."""


async def test_clicks_and_drags_land_where_the_screenshot_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans: dict[tuple[str, int], list[dict[str, Any]]] = {}
    expected: dict[str, float | None] = {}
    async with chromium("about:blank", size=DESKTOP) as shadow:
        for name in SOLVED:
            plans[(name, SEED)] = await plan(shadow, name, SEED)
            expected[name] = await replay(shadow, name, SEED, plans[(name, SEED)])
    outcomes, seen = await play(plans, tmp_path, monkeypatch, DESKTOP)
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


async def test_a_page_that_never_ends_or_never_shows_scores_zero_and_a_javascript_url_forges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a copy of circle-center whose start page is one that never draws a task (the ready probe waits its
    # 30 s, re-navigating, then the agent starts anyway and finds no task to act on)
    (suite,) = export(Suite(installed_suite().version, (installed_suite().task("circle-center"),), ()),
                      tmp_path / "tasks", {"circle-center": 1.0})  # fmt: skip
    toml = suite / "task.toml"
    toml.write_text(toml.read_text().replace('start_url = "http://127.0.0.1:8000/"',
                                             'start_url = "http://127.0.0.1:8000/state"'))  # fmt: skip
    plans = {
        ("click-test", SEED): [],  # done at once: the page never ends its episode
        ("enter-text", SEED): [{"navigate": FORGE}],
        ("circle-center", SEED): [{"click": [80, 100]}],
    }
    outcomes, seen = await play(plans, tmp_path, monkeypatch, DESKTOP, {"circle-center": suite})
    assert ("circle-center", SEED) not in seen  # no screenshot ever showed the task
    assert outcomes["circle-center"].early_termination_reason == "max_turns_reached"
    for name, o in outcomes.items():
        assert o.exception is None and o.agent_started, (name, o.exception)
        assert o.rewards == {"reward": 0.0}, name  # no report from the page: no raw reward
    assert outcomes["click-test"].early_termination_reason == "task_complete"
    said = {
        name: (tmp_path / "trials" / f"{name}-{SEED}.1" / "verifier" / "test-stdout.txt").read_text()
        for name in outcomes
    }
    assert "the page never ended the episode" in said["click-test"] and "never ended" in said["circle-center"]
    assert "forged" not in said["enter-text"], said["enter-text"]
