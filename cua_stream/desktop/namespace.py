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
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cua_stream.browser import CHROMIUM_POLICY
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


def keep_host_dirs(paths: Sequence[Path]) -> list[str]:
    """Commands that make host directories under /tmp visible again over the private /tmp, at the same
    paths (fd 9 holds the host's /tmp from before the tmpfs; a bind through /proc/self/fd follows it)."""
    q = shlex.quote
    out = []
    for path in paths:
        rel = path.resolve().relative_to("/tmp")
        # --no-canonicalize: mount(8) would resolve the /proc link to its text, "/tmp/...", the new tmpfs
        out += [
            f"mkdir -p {q(str(path))}",
            f"mount --no-canonicalize --bind /proc/self/fd/9/{q(str(rel))} {q(str(path))}",
        ]
    return out


def _setup_script(root: Path, keep: Sequence[Path] = ()) -> str:
    """Bind the episode's directories first (the episode root may itself be under /tmp, which the tmpfs
    then hides), then the private /tmp, with ``keep`` (host directories under /tmp the episode must still
    see: this process's Python environment when it lives there); say so on stdout when done."""
    q = shlex.quote
    return " && ".join(
        [
            "mkdir -p /logs /tests",
            f"mount --bind {q(str(root / 'logs'))} /logs",
            f"mount --bind {q(str(root / 'tests'))} /tests",
            "exec 9</tmp",
            "mount -t tmpfs -o mode=1777 tmpfs /tmp",
            *keep_host_dirs([p for p in keep if p.resolve().is_relative_to("/tmp") and p.is_dir()]),
            "exec 9<&-",
            # computer-1 starts Xvfb with -fbdir /var/tmp: the framebuffer is a file there, and two
            # episodes sharing /var/tmp would draw into one screen
            "mount -t tmpfs -o mode=1777 tmpfs /var/tmp",
            # every episode's X server is display :1, and Xvfb compiles its keymap to
            # /var/lib/xkb/server-1.xkm: shared, two starting at once break each other's keyboard
            "if [ -d /var/lib/xkb ]; then mount -t tmpfs tmpfs /var/lib/xkb; fi",
            "mkdir -m 1777 /tmp/.X11-unix",
            # Chromium's managed policies, for this episode only (a tmpfs over /etc/chromium, seeded
            # with the host's files): no sign-in, sync, password or translate bubbles popping up and
            # taking the keyboard focus from the page mid-episode
            f"if [ -d /etc/chromium ]; then cp -a /etc/chromium /tmp/.etc-chromium"
            " && mount -t tmpfs tmpfs /etc/chromium && cp -a /tmp/.etc-chromium/. /etc/chromium/"
            f" && mkdir -p /etc/chromium/policies/managed && echo {q(CHROMIUM_POLICY)}"
            " > /etc/chromium/policies/managed/cua-stream.json && rm -rf /tmp/.etc-chromium; fi",
            "mkdir -m 700 /tmp/home",
            "ip link set lo up",
            f"echo {READY}",
        ]
    )


LIVE: set[EpisodeNamespace] = set()
"""Namespaces started and not yet stopped in this process (``stop_all`` is a producer's last resort
when a cancelled trial's own cleanup did not run)."""


def stop_all() -> int:
    """Stop every namespace still live in this process; returns how many there were."""
    live = list(LIVE)
    for ns in live:
        ns.stop()
    return len(live)


class EpisodeNamespace:
    """Start with ``start()``, run commands with ``run()``, end everything with ``stop()``."""

    def __init__(self, root: Path, keep: Sequence[Path] = ()) -> None:
        self.root = root
        """Host directory of the episode: ``logs/`` and ``tests/`` (seen as /logs and /tests inside)."""
        self.keep = tuple(keep)
        """Host directories under /tmp that stay visible inside (the private /tmp would hide them); those
        that do not exist are skipped."""
        self._unshare: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None
        self._stopping = threading.Lock()
        self.init_pid: int | None = None

    def start(self) -> None:
        if os.geteuid() != 0:
            raise NamespaceError("the local desktop needs root for its per-episode namespaces (unshare)")
        for name in ("logs", "tests"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        # The init must reap: processes the episode leaves behind are re-parented to it, and a dead one
        # that nobody waits for stays a zombie that ``pgrep`` still finds (Harbor checks liveness with it).
        # The lifeline: a pipe whose only writer is this process. If it dies (even by kill -9) the pipe
        # closes, the watcher inside signals init, init exits, and the kernel kills the whole episode:
        # a crashed producer leaves no desktops behind.
        lifeline_r, self._lifeline = os.pipe()
        script = (
            f"{_setup_script(self.root, self.keep)} || exit 1; trap 'exit 0' TERM; trap : CHLD; "
            f"{{ cat <&{lifeline_r} >/dev/null; kill -TERM 1; }} & "
            "while :; do sleep 3600 & wait $!; done"
        )
        with open(self.root / "namespace.log", "wb") as log:  # a fresh log: READY must be this start's
            self._unshare = subprocess.Popen(
                ["unshare", "--mount", "--pid", "--net", "--fork", "--mount-proc", "--propagation", "private",
                 "bash", "-c", script],
                pass_fds=(lifeline_r,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )  # fmt: skip
        os.close(lifeline_r)
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
        LIVE.add(self)

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
        """Kill the namespace's init: the kernel then kills every process of the episode. Safe to call
        from two threads at once: a cancelled trial's cleanup can still be running in its worker thread
        when the producer's ``stop_all`` reaches the same namespace, and closing the lifeline twice
        failed (EBADF) — or, had the number been reused meanwhile, would close someone else's file."""
        with self._stopping:
            self._stop()

    def _stop(self) -> None:
        LIVE.discard(self)
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            self.init_pid = None
        if self._unshare is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._unshare.pid, signal.SIGKILL)
            self._unshare.wait()
            self._unshare = None
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
