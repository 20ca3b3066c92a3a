"""The bundled tasks' pure parts: seeded layouts, verdicts, the oracle's plan and its color search."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer

import httpx
import numpy as np
import pytest
from harbor.models.task.task import Task

from cua_stream.tasks import TASKS, task_dir
from cua_stream.tasks.pages import BANNER_H, PAGE_H, PAGE_W, Layout, layout, render
from cua_stream.tasks.policies import Step, find_color, oracle_action, oracle_plan, progress, reply_text
from cua_stream.tasks.ready import PAGE_BACKGROUND
from cua_stream.tasks.server import TaskState, handler
from cua_stream.tasks.verdict import reward


@pytest.mark.parametrize("task", TASKS)
def test_layouts_are_a_function_of_the_seed_and_vary_with_it(task: str) -> None:
    assert layout(task, 3) == layout(task, 3)
    seen = {(layout(task, s).answer, tuple((e.x, e.y) for e in layout(task, s).elements)) for s in range(20)}
    assert len(seen) >= 15  # positions and goals move: coordinates cannot be memorized


@pytest.mark.parametrize("task", TASKS)
def test_elements_stay_on_the_page_and_do_not_overlap(task: str) -> None:
    for seed in range(50):
        lay = layout(task, seed)
        boxes = [(e.x, e.y, e.x + e.w, e.y + e.h) for e in lay.elements if e.kind != "option"]
        for x0, y0, x1, y1 in boxes:
            assert x0 >= 0 and x1 <= PAGE_W + 40 and y0 >= 0 and y1 <= PAGE_H + 120
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (task, seed, a, b)
        assert len({e.color for e in lay.elements}) == len(lay.elements)  # the oracle tells them apart


def test_click_test_is_solved_by_a_fixed_click_and_nothing_else_is() -> None:
    """click-test's button always covers the page's centre (what makes it the first curve's task);
    click-button's targets do not sit still."""
    centre = (PAGE_W // 2, BANNER_H + PAGE_H // 2)

    def hit(lay: Layout) -> bool:
        e = next(e for e in lay.elements if e.label == lay.answer)
        return e.x <= centre[0] <= e.x + e.w and e.y <= centre[1] <= e.y + e.h

    assert all(hit(layout("click-test", s)) for s in range(500))
    assert sum(hit(layout("click-button", s)) for s in range(500)) < 100
    assert sum(hit(layout("click-box", s)) for s in range(500)) < 100


def test_click_box_shows_one_colored_box_among_grey_ones_and_nothing_to_read() -> None:
    """The target is the only saturated box, in any of the 9 cells; the page text is the same on every
    layout, so where to click is only on the screen, as a position."""
    seen = set()
    for seed in range(200):
        lay = layout("click-box", seed)
        target = lay.element("target")
        assert lay.answer == "target" and len(lay.elements) == 4
        assert max(target.color) - min(target.color) >= 100  # saturated: the palette's
        assert all(len(set(e.color)) == 1 for e in lay.elements if e is not target)  # grey
        seen.add(((target.x - 0) // 200, (target.y - BANNER_H) // 110))
        page = render(lay)
        assert ">target<" not in page and ">d1<" not in page  # no label drawn
        assert page.replace(str(seed), "").count(lay.goal) == 1
    assert len(seen) == 9
    assert (
        render(layout("click-box", 1)).split("<button")[0]
        == render(layout("click-box", 2)).split("<button")[0]
    )


def test_the_page_shows_the_goal_and_every_label() -> None:
    lay = layout("click-button", 5)
    page = render(lay)
    # the ready probe looks for the page's background on the screen
    assert f"background:#{PAGE_BACKGROUND.hex()}'" in page
    assert lay.goal in page and all(e.label in page for e in lay.elements)
    follow = layout("follow-link", 5)
    assert "Confirm" in render(follow, follow.answer)


@pytest.mark.parametrize("task", TASKS)
def test_every_bundled_task_is_a_harbor_task_with_a_start_url(task: str) -> None:
    loaded = Task(task_dir(task))
    assert loaded.config.metadata["start_url"] == "http://127.0.0.1:8000/"
    assert loaded.config.metadata["ready_probe"].endswith(" -m cua_stream.tasks.ready --port 8000")
    assert (task_dir(task) / "tests" / "test.sh").stat().st_mode & 0o111
    assert f"--task {task} " in (task_dir(task) / "environment" / "start.sh").read_text()


def test_the_ready_probe_fails_until_the_page_reports_its_first_frame() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(layout("click-test", 3), TaskState()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert "requestAnimationFrame" in httpx.get(url + "/").text  # the page posts after a frame
        assert httpx.get(url + "/painted").status_code == 503
        assert httpx.post(url + "/painted").status_code == 204
        assert httpx.get(url + "/painted").status_code == 200
        assert httpx.get(url + "/state").json() == {
            "events": []
        }  # the verifier's events stay the page's acts
    finally:
        server.shutdown()
        server.server_close()


def test_the_state_takes_reports_only_from_the_task_page_itself() -> None:
    """A page the agent opens itself (a ``data:`` URL: Origin ``null``; another origin) cannot report a
    click to the verifier; the task page's own JSON post from the server's origin can."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(layout("click-button", 3), TaskState()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    own = url.removeprefix("http://")
    forged = b'{"click": "anything"}'
    try:
        for headers, status in [
            ({"Content-Type": "application/json"}, 403),  # no Origin
            ({"Content-Type": "text/plain", "Origin": "null"}, 403),  # a data: page, no preflight needed
            ({"Content-Type": "application/json", "Origin": "http://evil.test"}, 403),
            ({"Content-Type": "text/plain", "Origin": f"http://{own}"}, 415),
        ]:
            assert httpx.post(url + "/state", content=forged, headers=headers).status_code == status, headers
        assert httpx.get(url + "/state").json() == {"events": []}
        page = {"Content-Type": "application/json", "Origin": f"http://{own}"}
        assert httpx.post(url + "/state", content=forged, headers=page).status_code == 204
        assert httpx.get(url + "/state").json() == {"events": [{"click": "anything"}]}
    finally:
        server.shutdown()
        server.server_close()


def test_unknown_tasks_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown bundled task 'nope'"):
        task_dir("nope")
    assert task_dir("cua/sign-up").name == "sign-up"


def test_verdicts_count_only_the_first_decisive_act() -> None:
    click = layout("click-button", 1)
    other = next(e.label for e in click.elements if e.label != click.answer)
    assert reward(click, [{"click": click.answer}], None) == 1.0
    assert reward(click, [{"click": other}, {"click": click.answer}], None) == 0.0
    assert reward(click, [], None) == 0.0
    test = layout("click-test", 1)
    assert reward(test, [{"click": test.answer}], "done\n") == 1.0
    assert reward(test, [{"click": test.answer}], None) == 0.0  # clicked, but never said it was done
    assert reward(test, [{"click": test.answer}], '{"analysis": "done"}') == 0.0
    assert reward(test, [], "done") == 0.0
    box = layout("click-box", 1)
    assert reward(box, [{"click": "target"}], "done") == 1.0
    assert reward(box, [{"click": "d2"}, {"click": "target"}], "done") == 0.0  # a grey box first
    assert reward(box, [{"click": "target"}], None) == 0.0  # never finished
    form = layout("fill-form", 1)
    assert reward(form, [{"submit": form.answer + " "}], None) == 1.0
    assert reward(form, [{"submit": "x"}, {"submit": form.answer}], None) == 0.0
    sign = layout("sign-up", 1)
    assert reward(sign, [{"submit": sign.answer, "agreed": True}], None) == 1.0
    assert reward(sign, [{"submit": sign.answer, "agreed": False}], None) == 0.0
    read = layout("read-value", 1)
    assert reward(read, [], f"{read.answer}\n") == 1.0
    assert reward(read, [], "0000") == 0.0 and reward(read, [], None) == 0.0
    link = layout("follow-link", 1)
    assert reward(link, [{"confirm": link.answer}], None) == 1.0
    assert reward(link, [{"confirm": ""}], None) == 0.0


def test_the_oracle_plan_ends_with_the_confirmation_round_trip() -> None:
    for task in TASKS:
        plan = oracle_plan(layout(task, 2))
        assert plan[-1].type == plan[-2].type and plan[-1].type in ("done", "answer")
    assert oracle_plan(layout("fill-form", 2))[1] == Step("type", layout("fill-form", 2).answer)


def test_find_color_returns_the_centre_on_the_normalized_grid() -> None:
    pixels = np.full((100, 200, 3), 240, dtype=np.uint8)
    pixels[40:60, 100:140] = (210, 40, 40)
    assert find_color(pixels, (215, 45, 35)) == (600, 500)  # tolerant of lossy screenshots
    assert find_color(pixels, (30, 160, 60)) is None


def test_find_color_takes_the_patch_shaped_like_the_element_not_a_desktop_icon_of_its_color() -> None:
    teal = (20, 150, 150)
    pixels = np.full((600, 800, 3), 240, dtype=np.uint8)
    pixels[540:580, 400:440] = teal  # a square dock icon, on screen before the page loads
    assert find_color(pixels, teal) is not None  # by color alone it is taken for the element
    assert find_color(pixels, teal, aspect=160 / 40) is None  # by its shape it is not
    pixels[300:340, 100:260] = teal  # the page's 160x40 menu
    assert find_color(pixels, teal, aspect=160 / 40) == (224, 533)  # its centre, not the icons' mean


def test_the_oracle_waits_until_its_target_is_on_screen_and_waits_do_not_count() -> None:
    lay = layout("click-button", 4)
    target = next(e for e in lay.elements if e.label == lay.answer)
    blank = np.full((60, 80, 3), 255, dtype=np.uint8)
    assert oracle_action(lay, [], blank)["type"] == "wait"
    shown = blank.copy()
    shown[10:20, 10:50] = target.color  # shaped like the button (160x40)
    action = oracle_action(lay, [reply_text({"type": "wait"})], shown)
    assert action["type"] == "click" and 0 <= action["x"] <= 999
    assert progress([reply_text({"type": "wait"}), reply_text(action), "not json"]) == 1
    assert oracle_action(lay, [reply_text(action)], shown)["type"] == "done"
    assert json.loads(reply_text(action))["action"] == action
