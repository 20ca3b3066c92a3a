"""What the local desktop needs on the host, and what is missing (``cua-stream desktop doctor``)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Requirement:
    program: str
    package: str

    @property
    def found(self) -> bool:
        return shutil.which(self.program) is not None


def requirements() -> list[Requirement]:
    """The programs computer-1's runtime and the episode namespaces call, with their Debian packages."""
    text = resources.files("cua_stream.desktop").joinpath("packages.txt").read_text()
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    return [Requirement(program, package) for program, package in rows]


def missing_packages() -> list[str]:
    return sorted({r.package for r in requirements() if not r.found})


def container_checks() -> list[tuple[str, bool, str]]:
    """What episodes in Docker need (``--environment docker``): (what, present, how to get it)."""
    from cua_stream.containers.compose_plugin import cached_plugin
    from cua_stream.containers.dockerd import DockerHome

    home = DockerHome.default()
    fix_apt = "apt-get install -y docker.io debootstrap (or scripts/setup.sh as root)"
    return [
        ("dockerd", shutil.which("dockerd") is not None, fix_apt),
        ("docker CLI", shutil.which("docker") is not None, fix_apt),
        ("debootstrap", shutil.which("debootstrap") is not None, fix_apt),
        (
            "compose plugin",
            home.compose_plugin.exists() or cached_plugin().exists(),
            "cua-stream containers start",
        ),
        (f"private daemon ({home.socket})", home.running(), "cua-stream containers start --build"),
    ]


def is_root() -> bool:
    return os.geteuid() == 0


def require_desktop() -> None:
    """NamespaceError (one line, the fix in it) unless this host can run local desktops."""
    from cua_stream.errors import NamespaceError

    if not is_root():
        raise NamespaceError(
            "the local desktop needs root for its per-episode namespaces (see `cua-stream desktop doctor`)"
        )
    if missing := missing_packages():
        raise NamespaceError(
            f"the local desktop is missing packages; install them: apt-get install -y {' '.join(missing)}"
        )
