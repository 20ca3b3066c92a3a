"""``cua-stream`` daemons as child processes: started, waited on until healthy, stopped on exit.

The demo runs the engine and the gateway this way, and so do the tests that need them as real servers.
No child outlives the command that started it: a SIGTERM to the command stops its children as Ctrl-C
does, and a command killed outright (``kill -9``) takes them with it (the kernel's parent-death signal).
Before, ``kill <learn>`` left its engine, gateway and teacher serving, holding their ports.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

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
    restore = _sigterm_interrupts()
    try:
        for args, _, log in specs:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "cua_stream", *args],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        preexec_fn=_die_with(os.getpid()),
                    )
                )
        deadline = time.monotonic() + timeout_s
        for proc, (args, health_url, log) in zip(procs, specs, strict=True):
            _wait_healthy(proc, args, health_url, log, deadline, timeout_s)
        yield procs
    finally:
        try:
            for proc in reversed(procs):  # one at a time: a gateway stops while its engine still answers
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            restore()


PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None] | None:
    """What a child runs before exec: ask the kernel for SIGTERM when its parent dies. The signal follows
    the forking *thread*, so it is asked only of children started from the main thread (a worker thread
    ending would stop them); a child whose parent died before it asked stops at once."""
    if threading.current_thread() is not threading.main_thread() or not sys.platform.startswith("linux"):
        return None
    # resolved here, in the parent: between fork and exec the child only calls it
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def _sigterm_interrupts() -> Callable[[], None]:
    """SIGTERM raises KeyboardInterrupt while children run, so the command unwinds and stops them as
    Ctrl-C would; the handler before is put back after. A command that handles SIGTERM itself, or one
    not on the main thread (signals reach only that one), keeps what it has."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = signal.getsignal(signal.SIGTERM)
    if before is not signal.SIG_DFL:
        return lambda: None

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, before)


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
