"""The ready probe's screen capture on a real X server: what ``import`` writes is what ``shows_page``
reads (ImageMagick's default 16-bit PPM once made every judgement fail)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from cua_stream.tasks.ready import screen as capture
from cua_stream.tasks.ready import shows_page

pytestmark = [
    pytest.mark.desktop(root=False, programs=("Xvfb", "import")),  # a bare X server and ImageMagick
]


def test_the_probe_reads_a_capture_of_the_display(monkeypatch: pytest.MonkeyPatch) -> None:
    display = next(n for n in range(90, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    xvfb = subprocess.Popen(["Xvfb", f":{display}", "-screen", "0", "160x120x24"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not Path(f"/tmp/.X11-unix/X{display}").exists():
            assert time.monotonic() < deadline and xvfb.poll() is None, "Xvfb did not start"
            time.sleep(0.05)
        monkeypatch.setenv("DISPLAY", f":{display}")
        image = capture()
        assert image is not None and image.startswith(b"P6\n160 120\n255\n")
        assert not shows_page(image)  # an empty X screen is black, not the page
        assert shows_page(image, background=b"\0\0\0")
    finally:
        xvfb.terminate()
        xvfb.wait()
