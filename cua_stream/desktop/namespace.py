"""One episode's private corner of the host: its own mount, PID and network namespace, held open by an
init process, entered by every command the episode runs.

Why each part (computer-1's runtime assumes a machine of its own):

- **mount**: ``/tmp`` and ``/var/tmp`` are fresh tmpfs (the X socket ``/tmp/.X11-unix/X1``, computer-1's
  ``/tmp/computer_1_*`` directories and Xvfb's framebuffer file in ``/var/tmp`` would collide between
  episodes: two Xvfb sharing it show one screen), and ``/logs`` and ``/tests`` are the episode's own host
  directories, bind-mounted;
- **PID**: Harbor's ``pkill -9 -f chromium`` and ``pkill -f xfce4-panel`` see only this episode's
  processes; and killing the namespace's init kills everything the episode started, daemons included;
- **network**: each episode has its own loopback, so two ``Xvfb :1`` and two DevTools ports on 9222
  coexist; the episode cannot reach host services (its pages are served from inside).

A command runs through ``nsenter`` with its output in files, not pipes: daemons the command starts in the
background inherit its stdout, and waiting for a pipe to close would wait for them. The command is done
when its process exits. Needs root (``unshare``/``nsenter``), as the desktop doctor says.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cua_stream.errors import NamespaceError

__all__ = ["CommandResult", "EpisodeNamespace", "NamespaceError"]

_READY_TIMEOUT_S = 10.0
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp/home",
    "LANG": "C.UTF-8",
}
"""What a command sees of an environment besides what it is given: not the host's variables (the
producer's own settings and keys stay out of the episode), and a private home (xfce4 and Chromium write
their settings and crash reports under it)."""


@dataclass(frozen=True)
class CommandResult:
    return_code: int
    stdout: str
    stderr: str


READY = "cua-namespace-ready"


def _setup_script(root: Path) -> str:
    """Bind the episode's directories first (the episode root may itself be under /tmp, which the tmpfs
    then hides), then the private /tmp; say so on stdout (the host's log file) when done."""
    q = shlex.quote
    return " && ".join(
        [
            "mkdir -p /logs /tests",
            f"mount --bind {q(str(root / 'logs'))} /logs",
            f"mount --bind {q(str(root / 'tests'))} /tests",
            "mount -t tmpfs -o mode=1777 tmpfs /tmp",
            # computer-1 starts Xvfb with -fbdir /var/tmp: the framebuffer is a file there, and two
            # episodes sharing /var/tmp would draw into one screen
            "mount -t tmpfs -o mode=1777 tmpfs /var/tmp",
            "mkdir -m 1777 /tmp/.X11-unix",
            "mkdir -m 700 /tmp/home",
            "ip link set lo up",
            f"echo {READY}",
        ]
    )


class EpisodeNamespace:
    """Start with ``start()``, run commands with ``run()``, end everything with ``stop()``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        """Host directory of the episode: ``logs/`` and ``tests/`` (seen as /logs and /tests inside)."""
        self._unshare: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None

    def start(self) -> None:
        if os.geteuid() != 0:
            raise NamespaceError("the local desktop needs root for its per-episode namespaces (unshare)")
        for name in ("logs", "tests"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        # The init must reap: processes the episode leaves behind are re-parented to it, and a dead one
        # that nobody waits for stays a zombie that ``pgrep`` still finds (Harbor checks liveness with it).
        script = f"{_setup_script(self.root)} || exit 1; trap : CHLD; while :; do sleep 3600 & wait $!; done"
        with open(self.root / "namespace.log", "ab") as log:
            self._unshare = subprocess.Popen(
                ["unshare", "--mount", "--pid", "--net", "--fork", "--mount-proc", "--propagation", "private",
                 "bash", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while READY not in (self.root / "namespace.log").read_text(errors="replace"):
            if self._unshare.poll() is not None or time.monotonic() > deadline:
                self.stop()
                detail = (self.root / "namespace.log").read_text(errors="replace")[-500:]
                raise NamespaceError(
                    f"the episode namespace did not come up: {detail.strip() or 'no output'}"
                )
            time.sleep(0.01)
        self.init_pid = self._init_pid()

    def _init_pid(self) -> int:
        """The namespace's init: the child ``unshare`` forked (it runs ``sleep infinity``)."""
        assert self._unshare is not None
        children = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children").read_text().split()
        if not children:
            raise NamespaceError("the episode namespace has no init process")
        return int(children[0])

    def command(self, command: str) -> list[str]:
        """argv that runs ``command`` with bash inside the namespace."""
        if self.init_pid is None:
            raise NamespaceError("the episode namespace is not started")
        return ["nsenter", "-t", str(self.init_pid), "-m", "-p", "-n", "--", "bash", "-c", command]

    def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: float | None = None,
    ) -> CommandResult:
        """Run ``command`` inside; returns when its process exits (daemons it started keep running)."""
        prefix = f"cd {shlex.quote(cwd)} && " if cwd else ""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                self.command(prefix + command),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env={**BASE_ENV, **(env or {})},
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=timeout_sec)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = 124  # timeout(1)'s status, as a shell user would expect
            out.seek(0)
            err.seek(0)
            return CommandResult(
                code, out.read().decode(errors="replace"), err.read().decode(errors="replace")
            )

    def stop(self) -> None:
        """Kill the namespace's init: the kernel then kills every process of the episode."""
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            self.init_pid = None
        if self._unshare is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._unshare.pid, signal.SIGKILL)
            self._unshare.wait()
            self._unshare = None
