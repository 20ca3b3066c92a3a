"""Drawn demonstrations (issue O): a click-box first screen redrawn for another layout, the oracle's reply
moved onto the new target, and the recorded first call replayed as a sample of its own (pure, with a
local blob store and the real Qwen tokenizer)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest
from PIL import Image

from consumers.trainer.sft.demonstrations import demonstrations
from consumers.trainer.sft.drawn import draw, drawable, moved_click
from cua_stream.binding.coordinates import GRID_MAX
from cua_stream.binding.screenshots import encode
from cua_stream.blobs import LocalBlobStore, sha256_of
from cua_stream.events import ImageRef, Reward, ScoreEvent
from cua_stream.tasks.blind import target_box
from cua_stream.tasks.pages import BANNER_H, BOX_JITTER_X, BOX_JITTER_Y, PAGE_H, PAGE_W, Layout, layout
from cua_stream.tasks.policies import find_color, reply_text
from cua_stream.tasks.redraw import PAGE_BACKGROUND, page_origin, redraw
from tests.unit.test_trainer_samples import call

DESKTOP = (32, 40, 64)
BANNER = (20, 90, 200)
ORIGIN = (96, 72)


def screen(lay: Layout, origin: tuple[int, int] = ORIGIN, *, target: bool = True) -> np.ndarray:
    """A desktop screenshot (800 x 600) with ``lay``'s page at ``origin``, drawn as Chromium shows it."""
    pixels = np.zeros((600, 800, 3), dtype=np.uint8)
    pixels[:] = DESKTOP
    ox, oy = origin
    pixels[oy : oy + BANNER_H + PAGE_H + BOX_JITTER_Y, ox : ox + PAGE_W + BOX_JITTER_X] = PAGE_BACKGROUND
    pixels[oy : oy + BANNER_H - 8, ox : ox + PAGE_W] = BANNER
    for e in lay.elements:
        if target or e.id != "target":
            pixels[oy + e.y : oy + e.y + e.h, ox + e.x : ox + e.x + e.w] = e.color
    return pixels


def on_screen(pixels: np.ndarray, click: tuple[int, int]) -> tuple[float, float]:
    h, w = pixels.shape[:2]
    return click[0] / GRID_MAX * (w - 1), click[1] / GRID_MAX * (h - 1)


def inside(box: tuple[int, int, int, int], point: tuple[float, float]) -> bool:
    return box[0] <= point[0] < box[0] + box[2] and box[1] <= point[1] < box[1] + box[3]


SEEN = layout("click-box", 7)


def test_the_page_is_found_where_its_target_is() -> None:
    assert page_origin(screen(SEEN), SEEN) == pytest.approx(ORIGIN, abs=1)
    assert page_origin(screen(SEEN, (0, 30)), SEEN) == pytest.approx((0, 30), abs=1)
    assert page_origin(screen(SEEN, target=False), SEEN) is None


@pytest.mark.parametrize("seed", [1, 2, 3, 123_456])
def test_a_redrawn_screen_shows_the_new_layout_on_the_same_page_and_desktop(seed: int) -> None:
    new = layout("click-box", seed)
    seen = screen(SEEN)
    drawn = redraw(seen, SEEN, new)
    assert drawn is not None
    # the page now is exactly what a screenshot of the new layout would be (a flat page redraws exactly)
    assert (drawn.pixels == screen(new)).all()
    x, y, w, h = target_box(new)
    assert drawn.target == (ORIGIN[0] + x, ORIGIN[1] + y, w, h)
    assert inside(drawn.target, on_screen(drawn.pixels, drawn.click))
    # the oracle finds its click where the drawn reply puts it
    found = find_color(drawn.pixels, new.element("target").color, aspect=w / h)
    assert found is not None and abs(found[0] - drawn.click[0]) <= 2 and abs(found[1] - drawn.click[1]) <= 2
    assert (seen[: ORIGIN[1]] == drawn.pixels[: ORIGIN[1]]).all()
    assert (seen[:, : ORIGIN[0]] == drawn.pixels[:, : ORIGIN[0]]).all()


def test_a_screen_without_its_target_is_not_redrawn_and_other_tasks_are_refused() -> None:
    assert redraw(screen(SEEN, target=False), SEEN, layout("click-box", 1)) is None
    with pytest.raises(ValueError, match="click-box"):
        redraw(screen(SEEN), SEEN, layout("click-button", 1))
    with pytest.raises(ValueError, match="click-button"):
        redraw(screen(SEEN), layout("click-button", 1), layout("click-button", 2))


def test_the_click_moves_and_everything_else_of_the_reply_stays() -> None:
    reply = reply_text({"type": "click", "x": 12, "y": 34}) + "<|im_end|>"
    moved = moved_click(reply, (567, 890))
    assert moved is not None and moved.endswith("}<|im_end|>")
    obj = json.loads(moved.removesuffix("<|im_end|>"))
    assert obj == {
        "analysis": "scripted policy",
        "plan": "click",
        "action": {"type": "click", "x": 567, "y": 890},
    }
    assert moved_click(reply_text({"type": "done", "result": "done"}), (1, 2)) is None
    assert moved_click(reply_text({"type": "wait", "duration": 1}), (1, 2)) is None
    assert moved_click("I would click the box", (1, 2)) is None
    assert moved_click('{"action": "click"', (1, 2)) is None


def base_call(tokenizer, blobs: LocalBlobStore, pixels: np.ndarray, episode: str, click: tuple[int, int]):  # type: ignore[no-untyped-def]
    data = encode(Image.fromarray(pixels), "WEBP")
    image = ImageRef(
        sha256=blobs.put(data), size=len(data), width=800, height=600, mime="image/webp", grid_thw=(1, 42, 56)
    )
    prompt = tokenizer.encode(
        "<|im_start|>user\nClick the colored box.<|vision_start|><|image_pad|><|vision_end|>"
    )
    reply = reply_text({"type": "click", "x": click[0], "y": click[1]}) + "<|im_end|>"
    first = call(0, None, prompt, tokenizer.encode(reply), images=(image,))
    return msgspec.structs.replace(first, episode_id=episode, call_id=f"{episode}:c0")


def test_drawn_samples_replay_the_recorded_prompt_on_new_screens_with_the_click_on_the_target(
    tmp_path: Path,
) -> None:
    from cua_stream.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    blobs = LocalBlobStore(tmp_path / "blobs")
    seen = screen(SEEN)
    base = base_call(tokenizer, blobs, seen, "demo-0", (300, 400))
    blank = base_call(tokenizer, blobs, screen(layout("click-box", 8), target=False), "demo-1", (1, 1))
    bases = [b for c, s in ((base, 7), (blank, 8)) if (b := drawable(c, "click-box", s))]
    seeds = [1_000, 1_001, 1_002]
    drawn = draw(bases, seeds, blobs, tokenizer)
    assert (drawn.bases, drawn.unseen, len(drawn.samples)) == (1, 1, 3)
    for seed, sample in zip(seeds, drawn.samples, strict=True):
        new = layout("click-box", seed)
        assert sample.episode_id == f"demo-0~drawn-{seed}"
        n = len(base.prompt_ids)
        assert list(sample.tokens[:n]) == list(base.prompt_ids)  # the agent's real context, untouched
        assert sample.loss_mask == b"\0" * n + b"\1" * (len(sample.tokens) - n)
        reply = tokenizer.decode(sample.tokens[n:])
        assert reply.endswith("<|im_end|>")
        action = json.loads(reply.removesuffix("<|im_end|>"))["action"]
        (image,) = sample.images
        assert (image.width, image.height, image.mime, image.grid_thw) == (
            800,
            600,
            "image/webp",
            (1, 42, 56),
        )
        data = blobs.get(image.sha256)
        assert image.sha256 == sha256_of(data) and image.size == len(data)
        with Image.open(io.BytesIO(data)) as img:
            assert img.format == "WEBP"
            pixels = np.asarray(img.convert("RGB"))
        x, y, w, h = target_box(new)
        assert inside((ORIGIN[0] + x, ORIGIN[1] + y, w, h), on_screen(pixels, (action["x"], action["y"])))
        found = find_color(pixels, new.element("target").color, aspect=w / h)
        assert found is not None and abs(found[0] - action["x"]) <= 3 and abs(found[1] - action["y"]) <= 3
    assert len({s.images[0].sha256 for s in drawn.samples}) == 3
    assert draw([], seeds, blobs, tokenizer).samples == ()


def test_only_a_drawable_tasks_first_call_with_one_screen_is_drawn_from() -> None:
    first = call(0, None, [1], [2], images=(ImageRef(sha256="0" * 64, size=1, width=8, height=8),))
    assert drawable(first, "click-box", 3) is not None
    assert drawable(first, "click-button", 3) is None
    assert drawable(msgspec.structs.replace(first, images=()), "click-box", 3) is None
    assert drawable(call(1, 0, [1], [2], images=first.images), "click-box", 3) is None


def test_demonstrations_keep_each_rewarded_episodes_first_call() -> None:
    calls = [
        msgspec.structs.replace(c, episode_id=e)
        for e in ("a", "b")
        for c in (call(0, None, [1], [2]), call(1, 0, [3], [4]))
    ]
    scores = [
        ScoreEvent(
            run_id="r", group_id="g", episode_id=e, verdict=Reward(value=v), policy_version=0, scored_at=0
        )
        for e, v in (("a", 1.0), ("b", 0.0))
    ]
    demos = demonstrations(scores, calls)
    assert [(c.episode_id, c.seq) for c in demos.firsts] == [("a", 0)]


def test_sfts_nll_is_measured_on_every_recorded_sample_and_the_first_drawn_ones() -> None:
    from consumers.trainer.sft.demonstrations import Demonstrations
    from consumers.trainer.sft_run import MEASURED_DRAWN, _measured

    samples = tuple(call(i, None, [1], [2]) for i in range(10 + 2 * MEASURED_DRAWN))
    demos = Demonstrations(samples, episodes=10, rejected={}, drawn=2 * MEASURED_DRAWN)  # type: ignore[arg-type]
    assert _measured(demos) == samples[: 10 + MEASURED_DRAWN]
    assert _measured(Demonstrations(samples[:10], episodes=10, rejected={})) == samples[:10]  # type: ignore[arg-type]
