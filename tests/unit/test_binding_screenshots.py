"""Screenshot sizing for Qwen3-VL: 32-pixel grid, pixel cap, real MIME labels."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from cua_stream.binding.screenshots import DEFAULT_MAX_PIXELS, FACTOR, MIN_PIXELS, fit_data_url, fit_to_grid

SIZES = [
    (1024, 900),
    (1024, 896),
    (1280, 800),
    (1366, 768),
    (1920, 1080),
    (2560, 1440),
    (3840, 2160),
    (800, 600),
    (640, 480),
    (333, 77),
    (120, 90),
    (4000, 300),
]


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((1024, 896), (1024, 896)),  # already on the grid and under the cap
        ((1024, 900), (1024, 896)),  # Harbor's default desktop
        ((1366, 768), (1344, 736)),  # rounds to 1376x768, over the cap, so shrinks
        ((1920, 1080), (1344, 768)),
        ((100, 50), (384, 192)),  # a zoom crop: scaled up to the processor's minimum
    ],
)
def test_known_sizes(size: tuple[int, int], expected: tuple[int, int]) -> None:
    assert fit_to_grid(*size) == expected


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("max_pixels", [DEFAULT_MAX_PIXELS, 512 * FACTOR * FACTOR, 2_000_000])
def test_grid_cap_and_fixed_point(size: tuple[int, int], max_pixels: int) -> None:
    w, h = fit_to_grid(*size, max_pixels=max_pixels)
    assert w % FACTOR == 0 and h % FACTOR == 0
    assert MIN_PIXELS <= w * h <= max_pixels
    assert fit_to_grid(w, h, max_pixels=max_pixels) == (w, h)
    # The aspect ratio moves by at most one grid step on the shorter side.
    assert abs(w / h - size[0] / size[1]) <= (size[0] / size[1]) * FACTOR / min(w, h) + 1e-9


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="positive"):
        fit_to_grid(0, 10)
    with pytest.raises(ValueError, match="min_pixels"):
        fit_to_grid(10, 10, max_pixels=MIN_PIXELS - 1)


@pytest.mark.slow
def test_matches_the_qwen_processor_resize() -> None:
    # The gateway's processor must keep what the agent sent: same size from the raw image, and a fixed
    # point for ours. transformers' import is slow, hence the mark.
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    for width, height in SIZES:
        for cap in (DEFAULT_MAX_PIXELS, 2_000_000):
            ours = fit_to_grid(width, height, max_pixels=cap)
            theirs = smart_resize(height, width, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=cap)
            assert ours == (theirs[1], theirs[0])
            assert smart_resize(ours[1], ours[0], factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=cap) == (
                ours[1],
                ours[0],
            )


def data_url(width: int, height: int, fmt: str, label: str | None = None) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(out, format=fmt)
    mime = label or f"image/{fmt.lower()}"
    return f"data:{mime};base64,{base64.b64encode(out.getvalue()).decode()}"


def decode(url: str) -> tuple[str, Image.Image]:
    header, _, payload = url.partition(",")
    image = Image.open(io.BytesIO(base64.b64decode(payload)))
    return header, image


def test_conforming_image_keeps_its_bytes() -> None:
    url = data_url(1024, 896, "WEBP")
    assert fit_data_url(url) == url


@pytest.mark.parametrize("fmt", ["WEBP", "PNG", "JPEG"])
def test_resized_image_keeps_its_format(fmt: str) -> None:
    header, image = decode(fit_data_url(data_url(1366, 768, fmt)))
    assert image.size == (1344, 736)
    assert image.format == fmt
    assert header == f"data:image/{fmt.lower()};base64"


def test_png_labelled_webp_is_relabelled() -> None:
    # What Harbor sends when the sandbox has no cwebp: PNG bytes in a .webp file, labelled image/webp.
    header, image = decode(fit_data_url(data_url(1024, 896, "PNG", label="image/webp")))
    assert (header, image.format) == ("data:image/png;base64", "PNG")


def test_other_formats_become_png() -> None:
    header, image = decode(fit_data_url(data_url(1024, 896, "BMP")))
    assert (header, image.format, image.size) == ("data:image/png;base64", "PNG", (1024, 896))


@pytest.mark.parametrize("bad", ["not a url", "data:image/png,abc", "data:image/png;base64,@@@"])
def test_bad_data_url(bad: str) -> None:
    with pytest.raises(ValueError):
        fit_data_url(bad)


@pytest.mark.parametrize("size", [(1000, 1), (1, 1000), (1366, 2), (3, 700), (1, 1), (5000, 20)])
def test_thin_zoom_crops_stay_within_the_processors_limits(size: tuple[int, int]) -> None:
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    from cua_stream.binding.screenshots import MAX_ASPECT

    w, h = fit_to_grid(*size)
    assert w % FACTOR == 0 and h % FACTOR == 0 and MIN_PIXELS <= w * h <= DEFAULT_MAX_PIXELS
    assert max(w, h) <= MAX_ASPECT * min(w, h) < 200 * min(w, h)
    # the processor keeps it as is (it raises past 200:1)
    assert smart_resize(h, w, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=DEFAULT_MAX_PIXELS) == (h, w)
    assert fit_to_grid(w, h) == (w, h)


@pytest.mark.parametrize("cap", [MIN_PIXELS, MIN_PIXELS + 1, MIN_PIXELS + 1024, MIN_PIXELS + 5000, 66_000])
@pytest.mark.parametrize("size", [(1280, 720), (1366, 768), (333, 77), (1024, 900)])
def test_caps_just_above_the_minimum_never_go_under_it(cap: int, size: tuple[int, int]) -> None:
    w, h = fit_to_grid(*size, max_pixels=cap)
    assert MIN_PIXELS <= w * h <= cap and w % FACTOR == 0 and h % FACTOR == 0
