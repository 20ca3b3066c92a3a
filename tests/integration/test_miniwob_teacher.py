"""The MiniWoB++ teacher on real pages in a real headless Chromium, without a desktop: each solver, played
on a shadow page alone, earns the page's own reward; and ``cua-stream policies`` (its app under uvicorn,
its browser started by its lifespan) answers a computer-1 conversation of ``miniwob/<name>`` with
clicks placed where the screenshot it is sent shows the task's frame, the text to type once the field is
focused, then done twice: its shadow page follows the episode by replaying its own earlier replies."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn

from cua_stream.devtools import headless_chromium
from cua_stream.tasks.miniwob.screen import Frame, to_grid
from cua_stream.tasks.miniwob.shadow import Shadow
from cua_stream.tasks.miniwob.solvers import SOLVERS
from cua_stream.tasks.miniwob.teacher import rehearse
from cua_stream.tasks.policy_server import create_app
from tests.conftest import free_port
from tests.integration.gateway_servers import serving
from tests.unit.test_miniwob_teacher import screenshot
from tests.unit.test_policy_server import data_url

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(600)]

PLAYED = ("click-test-2", "click-checkboxes", "click-tab-2", "enter-text", "login-user", "navigate-tree",
          "click-menu", "simple-arithmetic")  # fmt: skip
SEEDS = (21, 22)
DESKTOP = (800, 600)
FRAME = Frame(240, 107, 320)


async def test_each_solver_earns_the_pages_own_reward_on_a_shadow_page() -> None:
    async with headless_chromium() as browser:
        for name in PLAYED:
            for seed in SEEDS:
                done = await rehearse(browser, name, seed)
                assert done.raw == 1.0 and done.moves, (name, seed, done)


def png_of_desktop() -> str:
    """A screenshot as computer-1 sends it: the 800x600 desktop at 800x608, the frame at ``FRAME``."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(screenshot(FRAME.left, FRAME.top)).save(buf, format="PNG")
    return data_url(buf.getvalue())


def conversation(replies: list[str]) -> dict[str, Any]:
    """computer-1's messages after ``replies``: its prompt (naming the desktop), then a screenshot after
    each reply."""
    prompt = f"... The display is {DESKTOP[0]}x{DESKTOP[1]} pixels. ..."
    shot = {"type": "image_url", "image_url": {"url": png_of_desktop()}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": prompt}, shot]}]
    for reply in replies:
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": [shot]}]
    return {"model": "teacher", "messages": messages}


async def test_the_policy_server_teaches_an_episode_through_its_route() -> None:
    name, seed = "enter-text", 5
    async with headless_chromium() as browser:  # where the page's field and button are, read apart
        shadow = await Shadow.open(browser, name, seed)
        snap = await shadow.snapshot()
        await shadow.close()
    field, submit, said = snap.by_id("tt"), snap.by_id("subbtn"), snap.find("span")[0].own
    assert field is not None and submit is not None and field.point and submit.point
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), port=port, log_level="warning"))
    url = f"http://127.0.0.1:{port}/policies/oracle/miniwob/{name}/{seed}/v1/chat/completions"
    replies: list[str] = []
    actions = []
    with serving(server), anyio.fail_after(300):
        async with httpx.AsyncClient(timeout=120) as http:
            for _ in range(5):
                r = await http.post(url, json=conversation(replies))
                assert r.status_code == 200, r.text
                replies.append(r.json()["choices"][0]["message"]["content"])
                actions.append(json.loads(replies[-1])["action"])
    at = lambda point: to_grid(*FRAME.pixel(*point), DESKTOP)  # noqa: E731
    assert actions == [
        {"type": "click", "x": at(field.point)[0], "y": at(field.point)[1]},
        {"type": "type", "text": said},
        {"type": "click", "x": at(submit.point)[0], "y": at(submit.point)[1]},
        {"type": "done", "result": "done"},
        {"type": "done", "result": "done"},  # computer-1 asks to confirm
    ]


def test_every_solver_names_a_registered_task() -> None:
    from cua_stream.tasks.miniwob.suite import installed_suite

    assert set(SOLVERS) <= set(installed_suite().names)


async def test_the_blind_baseline_is_the_fixed_click_of_one_click_tasks_measured_on_the_page() -> None:
    """click-test's button moves with the layout: its best fixed click hits it on some layouts and the
    click there earns the page's reward on the layouts it hits, nothing on the others; enter-text needs
    typing, so no fixed click is defined."""
    from cua_stream.tasks.miniwob.blind import blind_baseline, fixed_click, target_map

    async with headless_chromium() as browser:
        assert await fixed_click(browser, "enter-text", (1, 2)) is None
        best = await fixed_click(browser, "click-test", (1, 2, 3, 4))
        assert best is not None and 1 <= best.hits <= 4 and best.layouts == 4
        maps = [await target_map(browser, "click-test", s) for s in (1, 2, 3, 4)]
        assert all(m is not None for m in maps)
        assert sum(bool(m[best.y, best.x]) for m in maps if m is not None) == best.hits  # the hits counted
        measured = await blind_baseline(browser, "miniwob/click-test", (1, 2, 3, 4), choice=(1, 2, 3, 4))
    assert measured is not None and measured.click == best
    won = sum(1 for _, raw in measured.raws if raw == 1.0)
    assert won == best.hits  # a click where the button is earns 1; elsewhere the page never ends


def test_a_policy_server_killed_outright_takes_its_browser_with_it(tmp_path: Path) -> None:
    """The shadow pages' Chromium runs in a session of its own (its renderers die with it as a group): a
    ``cua-stream policies`` killed with SIGKILL must not leave it running (its parent-death signal)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "cua_stream", "policies", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/policies/oracle/miniwob/click-test/5/v1/chat/completions"
        deadline = time.monotonic() + 120
        while True:  # the server's port opens; then a MiniWoB++ request starts the browser
            try:
                r = httpx.post(url, json=conversation([]), timeout=120)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    "the policy server did not start"
                )
                time.sleep(0.2)
        assert r.status_code == 200, r.text
        browsers = chromium_children(server.pid)
        assert browsers, "the teacher's request started no browser"
    finally:
        server.kill()
        server.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in browsers):
        assert time.monotonic() < deadline, f"browser processes {browsers} outlived their policy server"
        time.sleep(0.2)


def chromium_children(parent: int) -> list[int]:
    """The Chromium processes ``parent`` started directly."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"chromium" in cmdline:
            found.append(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_a_button_almost_covered_by_another_is_clicked_on_its_uncovered_sliver() -> None:
    """click-test-2 at this layout draws TWO over all of ONE but an L-shaped sliver 4 to 5 pixels wide,
    which the snapshot's centre and 7x7 grid both miss: the page's hit testing finds a pixel deep in the
    sliver (the teacher said done at once there, and scored 0, in an evaluation on the desktop)."""
    seed = 1099511627790
    async with headless_chromium() as browser:
        shadow = await Shadow.open(browser, "click-test-2", seed)
        snap = await shadow.snapshot()
        await shadow.close()
        (one,) = [e for e in snap if e.own == "ONE"]
        (two,) = [e for e in snap if e.own == "TWO"]
        assert one.point is not None
        x, y = one.point
        assert not (two.box[0] <= x < two.box[0] + two.box[2] and two.box[1] <= y < two.box[1] + two.box[3])
        assert (await rehearse(browser, "click-test-2", seed)).raw == 1.0
