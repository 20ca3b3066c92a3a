"""The ``docker compose`` CLI plugin (Compose v2+, which Harbor's docker environment runs), built from its
Go module: Debian bookworm ships only the old Python ``docker-compose`` 1.29, and no registry or release
download is reachable here, but the Go module proxy is. Built once into the user cache (about three
minutes on two cores), then copied into each private daemon's ``DOCKER_CONFIG/cli-plugins``."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from cua_stream.config import cache_dir, child_env
from cua_stream.errors import ContainerEngineError

MODULE = "github.com/docker/compose/v5"
VERSION = "v5.6.0"
BUILD_TIMEOUT_S = 1800


def cached_plugin() -> Path:
    return cache_dir() / "compose" / VERSION / "docker-compose"


def ensure_plugin(target: Path) -> Path:
    """``target`` holds the compose plugin (built into the cache first if it is not there)."""
    built = cached_plugin()
    if not built.exists():
        build(built)
    if not target.exists() or target.stat().st_size != built.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)
        target.chmod(0o755)
    return target


def build(out: Path) -> None:
    """``go build`` of compose's CLI in a scratch module (``go install ...@version`` is refused: compose's
    go.mod has exclude directives)."""
    go = shutil.which("go")
    if go is None:
        raise ContainerEngineError(
            "the docker compose plugin is missing and Go is not installed to build it: install Go "
            f"(https://go.dev/dl or apt-get install golang) or put the plugin at {out}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    env = child_env(GOFLAGS="-mod=mod", CGO_ENABLED="0")
    with tempfile.TemporaryDirectory(prefix="cua-compose-") as scratch:
        steps = [
            [go, "mod", "init", "cua-stream/compose-build"],
            [go, "get", f"{MODULE}/cmd@{VERSION}"],
            [go, "build", "-trimpath", "-o", str(out) + ".tmp", f"{MODULE}/cmd"],
        ]
        for step in steps:
            done = subprocess.run(step, cwd=scratch, env=env, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT_S)  # fmt: skip
            if done.returncode != 0:
                raise ContainerEngineError(
                    f"building docker compose {VERSION} failed at `{' '.join(step[1:3])}`:\n{done.stderr[-2000:]}"
                )
    Path(str(out) + ".tmp").replace(out)
