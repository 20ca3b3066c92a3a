"""The container engine for the tests that run episodes in Docker: cua-stream's private daemon, started
(and the images built: cached, minutes the first time) if ``scripts/test.sh`` has not done so already.
The docker CLI and Harbor reach it through the environment this fixture sets."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from cua_stream.containers import dockerd, ensure_running


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[dockerd.DockerHome]:
    if os.geteuid() != 0:
        pytest.skip("the private Docker daemon needs root (CI runs as root)")
    saved = {k: os.environ.get(k) for k in dockerd.DockerHome.default().client_env()}
    home, started = ensure_running()
    try:
        yield home
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if started:
            dockerd.stop(home)


def containers(label: str) -> list[str]:
    """Ids of the containers (running or not) with ``label`` (``key=value`` or ``key``)."""
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return out.stdout.split()
