"""The installed wheel holds what the package runs: built from the packaged sources, installed without
its dependencies in a scratch venv, and looked at from that venv's python (isolated: neither the checkout
nor ``PYTHONPATH`` on its path), the megatron worker is found as a module of the package, with the files
it loads beside it. A path into ``scripts/`` worked in a checkout only: ``scripts/`` is not packaged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ("pyproject.toml", "README.md", "cua_stream", "producers", "consumers")

LOOK = """
import json
from consumers.trainer.backends.megatron import worker_file
worker = worker_file()
print(json.dumps({
    "worker": str(worker),
    "is_file": worker.is_file(),
    "megatron_cpu": (worker.parent / "megatron_cpu.py").is_file(),
    "loss": (worker.parents[2] / "grpo" / "loss.py").is_file(),
}))
"""


def run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_installed_wheel_finds_the_megatron_worker_as_a_module(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: building in the checkout would leave build/ and egg-info there
    source.mkdir()
    for name in PACKAGED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check")
    # no build isolation, no index: the running venv's setuptools builds it, offline
    run(
        *pip,
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        "-w",
        wheels,
        source,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("cua_stream-*.whl")
    scratch = tmp_path / "venv"
    venv.create(scratch, with_pip=False)
    python = scratch / "bin" / "python"
    run(*pip, "--python", python, "install", "--no-deps", "--no-index", "-q", wheel, cwd=tmp_path)

    found = json.loads(run(python, "-I", "-c", LOOK, cwd=tmp_path))

    assert Path(found["worker"]).is_relative_to(scratch), found
    assert found["is_file"] and found["megatron_cpu"] and found["loss"], found
