"""A private Docker daemon: its socket, data root, exec root, pid file and log under one directory
(``<state dir>/docker``), started and stopped by cua-stream, touching nothing else of the host's Docker.

Clients reach it through two environment variables (``client_env``): ``DOCKER_HOST`` (the docker CLI,
Harbor's ``docker`` and ``docker compose`` calls) and ``DOCKER_CONFIG``, whose ``cli-plugins/`` holds the
compose plugin (Harbor forwards ``DOCKER_CONFIG`` to compose and offers no ``--config`` of its own).

Started with ``--iptables=false --bridge=none``: nothing of the host's firewall or bridges is changed;
compose's own project networks still work, and the episodes run with no network at all.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from cua_stream.config import docker_dir
from cua_stream.errors import ContainerEngineError
from cua_stream.procs import pid_alive

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_SOCKET_MAX = 100
"""Bytes a unix socket path may have (108 on Linux, less containerd's suffixes)."""


_started: dict[Path, subprocess.Popen[bytes]] = {}
"""The daemons this process started, by home: held so that ``stop`` reaps them (an exited child left
unreaped stays a zombie that looks alive, and a dropped ``Popen`` of a running child warns)."""


@dataclass(frozen=True)
class DockerHome:
    """Where the private daemon keeps everything."""

    root: Path

    @classmethod
    def default(cls) -> DockerHome:
        return cls(docker_dir())

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def config(self) -> Path:
        """``DOCKER_CONFIG``: the compose plugin is in its ``cli-plugins/``."""
        return self.root / "config"

    @property
    def compose_plugin(self) -> Path:
        return self.config / "cli-plugins" / "docker-compose"

    @property
    def pid_file(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def log(self) -> Path:
        return self.root / "dockerd.log"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def client_env(self) -> dict[str, str]:
        """The variables that point docker, docker compose and Harbor at this daemon."""
        return {"DOCKER_HOST": self.host, "DOCKER_CONFIG": str(self.config)}

    def running(self) -> bool:
        """Whether the daemon answers on its socket."""
        return ping(self.socket)

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None


def ping(socket: Path, timeout_s: float = 2.0) -> bool:
    """Docker's ``/_ping`` over the unix socket answers OK."""
    if not socket.exists():
        return False
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), timeout=timeout_s) as http:
            return http.get("http://docker/_ping").text == "OK"
    except httpx.HTTPError:
        return False


def require_dockerd() -> str:
    """The dockerd program (ContainerEngineError saying how to install it otherwise)."""
    found = shutil.which("dockerd")
    if found is None:
        raise ContainerEngineError(
            "dockerd is not installed: run scripts/setup.sh as root (it installs Debian's docker.io), "
            "or apt-get install -y docker.io"
        )
    return found


def start(home: DockerHome, timeout_s: float = START_TIMEOUT_S) -> bool:
    """Start the daemon unless it already answers; True if this call started it."""
    if home.running():
        return False
    if os.geteuid() != 0:
        raise ContainerEngineError("the private Docker daemon needs root (cua-stream containers start)")
    dockerd = require_dockerd()
    exec_root = home.root / "run"
    if len(str(exec_root / "containerd" / "containerd.sock")) > _SOCKET_MAX:
        raise ContainerEngineError(
            f"CUA_DOCKER_HOME {home.root} is too long a path for the daemon's sockets: pick a shorter one"
        )
    for d in (home.root, home.config / "cli-plugins", exec_root):
        d.mkdir(parents=True, exist_ok=True)
    home.socket.unlink(missing_ok=True)  # left by a daemon that was killed
    cmd = [dockerd, "--iptables=false", "--bridge=none", "--data-root", str(home.root / "data"),
           "--exec-root", str(exec_root), "-H", home.host, "--pidfile", str(home.pid_file)]  # fmt: skip
    with home.log.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    _started[home.root] = proc
    deadline = time.monotonic() + timeout_s
    while not home.running():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            raise ContainerEngineError(f"dockerd did not start (log {home.log}):\n{_tail(home.log)}")
        time.sleep(0.2)
    return True


def stop(home: DockerHome, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stop the daemon (its containers stop with it); True if one was running."""
    pid = home.pid()
    if pid is None or not pid_alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    ours = _started.pop(home.root, None)
    deadline = time.monotonic() + timeout_s
    while (ours.poll() is None) if ours is not None else pid_alive(pid):  # ours: reaped, not a zombie
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    if ours is not None:
        ours.wait()
    return True


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
