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
