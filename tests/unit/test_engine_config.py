"""The reference engine's configuration: bad values are one error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from cua_stream.engine.config import EngineConfig
from cua_stream.errors import ConfigError


@pytest.mark.parametrize("latency", [-0.1, float("nan")])
def test_a_bad_step_latency_is_refused_naming_the_field(tmp_path: Path, latency: float) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"engine\.step_latency_s: must be >= 0"):
        EngineConfig(model_path=str(tmp_path), step_latency_s=latency)
    assert EngineConfig(model_path=str(tmp_path), step_latency_s=0.05).step_latency_s == 0.05
