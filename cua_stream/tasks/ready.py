"""The bundled tasks' ready probe: the page says it drew a frame, and the screen shows it.

The page posts ``/painted`` two animation frames after it loads: its renderer has produced a frame. The
screenshot computer-1 takes is of the X display, which Chromium (software compositing, no GPU) updates
a moment later, longer on a busy machine: a probe on ``/painted`` alone let a screenshot of the blank
browser through under load, and the oracle's first turn was a ``wait``. So the probe also captures the
display as computer-1 does (``import -window root``) and passes once the lower half of the screen is
mostly the page's own background (``pages.render``'s), which no blank or half-navigated browser shows.

Run inside the episode's environment: ``python -m cua_stream.tasks.ready --port 8000`` exits 0 when
ready, 1 when not yet. Standard library only. The tasks' probe asks ``/painted`` with curl first, so
the interpreter starts only once the page says it drew (the probe is polled every 0.1 s).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import urllib.error
import urllib.request

PAGE_BACKGROUND = bytes((0xF4, 0xF4, 0xF4))
"""``pages.render``'s body background, #f4f4f4 (about:blank is white)."""
SHARE = 0.25
"""Of the lower half's pixels; the rest may be the task's elements (click-test's button on a small
desktop covers about a third of it)."""


def shows_page(ppm: bytes, background: bytes = PAGE_BACKGROUND, share: float = SHARE) -> bool:
    """Whether at least ``share`` of the lower half of binary-PPM (P6, 8-bit) image ``ppm`` is
    ``background``."""
    fields, rest = _header(ppm)
    width, height = int(fields[1]), int(fields[2])
    if fields[0] != b"P6" or int(fields[3]) != 255:
        raise ValueError("not an 8-bit binary PPM (P6)")
    pixels = rest[: width * height * 3]
    lower = pixels[(height // 2) * width * 3 :]
    # Runs of the background are aligned on pixels, so ``count`` finds each of its pixels once.
    return lower.count(background) >= share * (height - height // 2) * width


def _header(ppm: bytes) -> tuple[list[bytes], bytes]:
    """The four header fields (magic, width, height, maxval) and the bytes after them."""
    fields: list[bytes] = []
    i = 0
    while len(fields) < 4:
        while i < len(ppm) and ppm[i : i + 1].isspace():
            i += 1
        if ppm[i : i + 1] == b"#":  # a comment, to the end of its line
            i = ppm.index(b"\n", i)
            continue
        start = i
        while i < len(ppm) and not ppm[i : i + 1].isspace():
            i += 1
        if start == i:
            raise ValueError("a truncated PPM header")
        fields.append(ppm[start:i])
    return fields, ppm[i + 1 :]


def painted(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/painted", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def screen() -> bytes | None:
    """The X display as a PPM, or None when it cannot be captured (then ``/painted`` alone decides)."""
    env = {**os.environ, "DISPLAY": os.environ.get("DISPLAY", ":1")}
    try:
        done = subprocess.run(
            ["import", "-window", "root", "-depth", "8", "ppm:-"],  # 8-bit: ImageMagick's Q16 writes 16
            capture_output=True,
            timeout=10,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


def arm(port: int) -> None:
    """Tell the task's server the page is on screen, so the episode has started (``--arm``: a MiniWoB++
    task's server records a load of its page after this as the agent leaving it). Best effort: an
    unarmed episode only keeps the harness's leniency about reloads."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/armed", data=b"", method="POST")
    with contextlib.suppress(urllib.error.URLError, OSError):
        urllib.request.urlopen(request, timeout=5).close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--arm", action="store_true", help="once ready, POST /armed (miniwob/* tasks)")
    args = parser.parse_args(argv)
    if not painted(args.port):
        return 1
    image = screen()
    if image is not None and not shows_page(image):
        return 1
    if args.arm:
        arm(args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
