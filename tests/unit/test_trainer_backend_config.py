"""``trainer.backend`` selects what trains: torch by default, megatron when asked, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers.trainer.config import trainer_config
from cua_stream.errors import ConfigError


def test_the_backend_is_torch_by_default_megatron_when_asked_and_an_unknown_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")
    base = {"trainer": {"run_id": "r", "model_path": str(tmp_path)}}
    monkeypatch.delenv("CUA_TRAINER_BACKEND", raising=False)
    assert trainer_config(base).backend == "torch"
    assert trainer_config(base, overrides={"backend": "megatron"}).backend == "megatron"
    with pytest.raises(ConfigError, match="trainer.backend"):
        trainer_config(base, overrides={"backend": "jax"})


def test_the_device_is_the_cpu_by_default_a_gpu_for_megatron_only_and_a_bad_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")
    base = {"trainer": {"run_id": "r", "model_path": str(tmp_path)}}
    for name in ("CUA_TRAINER_BACKEND", "CUA_TRAINER_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    assert trainer_config(base).device == "cpu"
    for device in ("cuda", "cuda:1"):
        assert trainer_config(base, overrides={"backend": "megatron", "device": device}).device == device
    with pytest.raises(ConfigError, match=r"trainer.device: 'cuda' needs trainer.backend = 'megatron'"):
        trainer_config(base, overrides={"device": "cuda"})  # the torch backend trains on the CPU
    for bad in ("gpu", "cuda:", "cuda:x", "CPU"):
        with pytest.raises(ConfigError, match=r"trainer.device: cpu, cuda or cuda:N"):
            trainer_config(base, overrides={"backend": "megatron", "device": bad})
    monkeypatch.setenv("CUA_TRAINER_BACKEND", "megatron")
    monkeypatch.setenv("CUA_TRAINER_DEVICE", "cuda:0")
    assert trainer_config(base).device == "cuda:0"
