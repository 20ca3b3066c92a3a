"""Where the Megatron backend finds its worker and megatron-bridge's python, in a checkout and without one
(an installed wheel: ``scripts/`` is not packaged; ``tests/integration/test_wheel.py`` installs one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from consumers.trainer.backends import megatron_vl_backend
from consumers.trainer.backends.megatron import worker_file
from consumers.trainer.backends.megatron_vl_backend import WorkerError, megatron_python


def test_the_worker_is_a_module_of_the_package_with_what_it_loads_beside_it() -> None:
    worker = worker_file()
    assert worker.parent == Path(megatron_vl_backend.__file__).parent / "megatron"
    assert (worker.parent / "megatron_cpu.py").is_file()  # imported from the worker's own folder
    assert (worker.parents[2] / "grpo" / "loss.py").is_file()  # the loss it loads by file


# The worker as megatron-bridge's venv runs it: by its file, its folder first on the path, nothing of
# cua-stream's importable (imports of consumers or cua_stream fail, as there).
LOADS_THE_LOSS = """
import sys, importlib.abc
class NoCuaStream(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("consumers", "cua_stream", "producers"):
            raise ImportError(f"no {name} in megatron-bridge's venv")
sys.meta_path.insert(0, NoCuaStream())
sys.path.insert(0, sys.argv[1])
import worker
loss = worker.load_policy_loss()
print(loss.policy_loss.__name__, loss.LossConfig.__module__)
"""


def test_the_worker_loads_the_loss_by_its_file_without_cua_stream() -> None:
    worker = worker_file()
    done = subprocess.run(
        [sys.executable, "-I", "-c", LOADS_THE_LOSS, str(worker.parent)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["policy_loss", "consumers.trainer.grpo.loss_config"]


def test_in_a_checkout_megatron_python_finds_the_script_that_makes_the_venv() -> None:
    assert (megatron_vl_backend.ROOT / "scripts" / "megatron-env.sh").is_file()


def test_without_a_checkout_megatron_python_names_the_variable_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CUA_MEGATRON_PYTHON", raising=False)
    monkeypatch.setattr(megatron_vl_backend, "ROOT", tmp_path)  # as installed: no scripts/ beside it
    with pytest.raises(WorkerError, match="set CUA_MEGATRON_PYTHON to megatron-bridge's python"):
        megatron_python()
    monkeypatch.setenv("CUA_MEGATRON_PYTHON", "/opt/megatron/bin/python")
    assert megatron_python() == "/opt/megatron/bin/python"
