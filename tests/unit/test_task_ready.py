"""The bundled tasks' ready probe's judgement of a captured screen (PPM images built here)."""

from __future__ import annotations

import pytest

from cua_stream.tasks.ready import PAGE_BACKGROUND, shows_page

WHITE, CHROME, BUTTON = b"\xff\xff\xff", b"\xde\xe1\xe6", b"\xd2\x28\x28"


def ppm(rows: list[bytes], width: int, header: bytes = b"") -> bytes:
    return b"P6\n" + header + f"{width} {len(rows)}\n255\n".encode() + b"".join(rows)


def screen(width: int, height: int, lower: bytes) -> bytes:
    """Browser chrome on the upper half, ``lower`` repeated over each row of the lower half."""
    top = [CHROME * width] * (height - height // 2)
    return ppm(top + [lower] * (height // 2), width)


def test_a_drawn_page_passes_and_a_blank_browser_does_not() -> None:
    assert shows_page(screen(40, 30, PAGE_BACKGROUND * 40))
    assert not shows_page(screen(40, 30, WHITE * 40))
    # the task's elements may cover most of it: a quarter of the page's background is enough
    assert shows_page(screen(40, 30, PAGE_BACKGROUND * 10 + BUTTON * 30))
    assert not shows_page(screen(40, 30, PAGE_BACKGROUND * 9 + BUTTON * 31))
    # the background only in the upper half (the browser still drawing the rest) is not the page
    upper_only = ppm([PAGE_BACKGROUND * 40] * 15 + [WHITE * 40] * 15, 40)
    assert not shows_page(upper_only)


def test_a_header_comment_is_skipped() -> None:
    assert shows_page(ppm([PAGE_BACKGROUND * 4] * 4, 4, header=b"# ImageMagick\n"))


@pytest.mark.parametrize(
    "image", [b"P5\n4 4\n255\n" + bytes(16), b"P6\n4 4\n65535\n" + bytes(96), b"P6\n4", b""]
)
def test_what_is_not_an_8_bit_ppm_is_refused(image: bytes) -> None:
    with pytest.raises(ValueError):
        shows_page(image)
