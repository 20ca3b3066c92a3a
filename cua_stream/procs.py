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


Child = tuple[list[str], str, Path]
"""A daemon to run: ``cua-stream`` arguments, its health URL, its log file."""


@contextmanager
def child(
    args: list[str], health_url: str, log: Path, timeout_s: float = 180.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cua-stream <args>`` (output to ``log``) until the block ends; first wait until ``health_url``
    answers 200. A child that exits or stays unhealthy raises with the end of its log."""
    with children([(args, health_url, log)], timeout_s) as (proc,):
        yield proc


@contextmanager
def children(specs: list[Child], timeout_s: float = 180.0) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run every daemon of ``specs`` until the block ends, all started at once, then each waited on until
    healthy (none needs another to start: the gateway reaches its engine per request), so their start-ups
    overlap (an engine's and a gateway's are mostly imports, ~4 s each of one core). One that exits or
    stays unhealthy raises with the end of its log; all are stopped on the way out, last started first."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for args, _, log in specs:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "cua_stream", *args], stdout=out, stderr=subprocess.STDOUT
                    )
                )
        deadline = time.monotonic() + timeout_s
        for proc, (args, health_url, log) in zip(procs, specs, strict=True):
            _wait_healthy(proc, args, health_url, log, deadline, timeout_s)
        yield procs
    finally:
        for proc in reversed(procs):  # one at a time: a gateway stops while its engine still answers
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(
    proc: subprocess.Popen[bytes],
    args: list[str],
    health_url: str,
    log: Path,
    deadline: float,
    timeout_s: float,
) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"`cua-stream {args[0]}` exited with {proc.returncode}:\n{_tail(log)}")
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"`cua-stream {args[0]}` not healthy after {timeout_s:.0f}s:\n{_tail(log)}")
        time.sleep(0.2)
