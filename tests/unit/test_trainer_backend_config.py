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
