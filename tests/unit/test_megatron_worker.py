"""Where the Megatron backend finds its worker and megatron-bridge's python, in a checkout and without one
(an installed wheel: ``scripts/`` is not packaged; ``tests/integration/test_wheel.py`` installs one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers.trainer import megatron_vl_backend
from consumers.trainer.megatron import worker_file
from consumers.trainer.megatron_vl_backend import WorkerError, megatron_python


def test_the_worker_is_a_module_of_the_package_with_what_it_loads_beside_it() -> None:
    worker = worker_file()
    assert worker.parent == Path(megatron_vl_backend.__file__).parent / "megatron"
    assert (worker.parent / "megatron_cpu.py").is_file()  # imported from the worker's own folder
    assert (worker.parents[1] / "loss.py").is_file()  # the loss it loads by file


def test_without_a_checkout_megatron_python_names_the_variable_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CUA_MEGATRON_PYTHON", raising=False)
    monkeypatch.setattr(megatron_vl_backend, "ROOT", tmp_path)  # as installed: no scripts/ beside it
    with pytest.raises(WorkerError, match="set CUA_MEGATRON_PYTHON to megatron-bridge's python"):
        megatron_python()
    monkeypatch.setenv("CUA_MEGATRON_PYTHON", "/opt/megatron/bin/python")
    assert megatron_python() == "/opt/megatron/bin/python"
