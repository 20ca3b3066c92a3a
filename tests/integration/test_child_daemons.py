"""No daemon outlives the command that started it (``procs.children``, which ``demo``, ``learn``, ``eval``
and ``record-oracle`` start theirs with): a SIGTERM to the command stops them as Ctrl-C does, and a
``kill -9`` of the command takes them with it. Real processes: a command process running ``children``
over the teacher's policy server (``cua-stream policies``, a real HTTP daemon with ``/health``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cua_stream.procs import pid_alive
from tests.conftest import free_port

pytestmark = pytest.mark.slow

COMMAND = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from cua_stream.procs import children

    port, log = sys.argv[1], Path(sys.argv[2])
    spec = (["policies", "--port", port], f"http://127.0.0.1:{port}/health", log)
    try:
        with children([spec]) as (proc,):
            print(proc.pid, flush=True)
            time.sleep(600)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    """
)


def start_command(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """The command, and its child's pid once the child answers ``/health``."""
    command = subprocess.Popen(
        [sys.executable, "-c", COMMAND, str(free_port()), str(tmp_path / "policies.log")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert command.stdout is not None
    line = command.stdout.readline()
    if not line.strip().isdigit():
        stop(command, None)
        pytest.fail(f"the command did not start its child: {line!r}")
    return command, int(line)


def stop(command: subprocess.Popen[str], child: int | None) -> None:
    command.kill()
    command.wait()
    if command.stdout is not None:
        command.stdout.close()
    if child is not None and pid_alive(child):
        os.kill(child, signal.SIGKILL)


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_sigterm_to_the_command_stops_its_children(tmp_path: Path) -> None:
    command, child = start_command(tmp_path)
    try:
        command.send_signal(signal.SIGTERM)
        assert command.wait(60) == 0
        assert command.stdout is not None and command.stdout.read().strip() == "stopped"
        assert gone_within(child, 5), "the command exited and left its child running"
    finally:
        stop(command, child)


def test_a_command_killed_outright_takes_its_children_with_it(tmp_path: Path) -> None:
    command, child = start_command(tmp_path)
    try:
        command.kill()
        command.wait(10)
        assert gone_within(child, 30), "a kill -9 of the command left its child running"
    finally:
        stop(command, child)
