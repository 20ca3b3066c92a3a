"""``cua-stream`` daemons as child processes: started, waited on until healthy, stopped on exit.

The demo runs the engine and the gateway this way, and so do the tests that need them as real servers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs: an exited child of ours is reaped (not counted as alive), and a
    zombie another process has not reaped yet counts as gone."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:  # not our child
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _tail(log: Path, n: int = 4000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except FileNotFoundError:
        return "(no log)"


@contextmanager
def child(
    args: list[str], health_url: str, log: Path, timeout_s: float = 180.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cua-stream <args>`` (output to ``log``) until the block ends; first wait until ``health_url``
    answers 200. A child that exits or stays unhealthy raises with the end of its log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cua_stream", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"`cua-stream {args[0]}` exited with {proc.returncode}:\n{_tail(log)}")
            try:
                if httpx.get(health_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"`cua-stream {args[0]}` not healthy after {timeout_s:.0f}s:\n{_tail(log)}"
                )
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
