"""Where the installed MiniWoB++ package is, and which version it is, found without importing it (its
``__init__`` registers gymnasium environments, and the setup installs it without its dependencies):
``importlib.util.find_spec`` of a top-level name only searches the path, and ``importlib.metadata``
reads the distribution's ``METADATA``. The tasks image carries the same two things (``miniwob/html`` and
the distribution's metadata on its ``PYTHONPATH``), so this finds them there too. Standard library only:
the episode's page server calls it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from cua_stream.errors import MiniwobMissing

DISTRIBUTION = "miniwob"
SETUP_STEP = "run scripts/setup.sh (it installs miniwob, pinned with its hash, without its dependencies)"


@dataclass(frozen=True)
class Installed:
    """The installed package: its directory and version."""

    root: Path
    version: str

    @property
    def html(self) -> Path:
        """The task pages (``miniwob/<name>.html``) and what they load (``core/``, ``common/``)."""
        return self.root / "html"

    def page(self, name: str) -> Path:
        return self.html / "miniwob" / f"{name}.html"


def installed() -> Installed:
    """The installed MiniWoB++ package; MiniwobMissing (naming the setup step) when there is none."""
    spec = importlib.util.find_spec(DISTRIBUTION)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise MiniwobMissing(f"MiniWoB++ (the miniwob package) is not installed: {SETUP_STEP}")
    root = Path(locations[0])
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise MiniwobMissing(f"{root} has no installed distribution's metadata: {SETUP_STEP}") from None
    found = Installed(root, version)
    if not (found.html / "core" / "core.js").is_file():
        raise MiniwobMissing(f"{found.html} holds no MiniWoB++ pages: {SETUP_STEP}")
    return found
