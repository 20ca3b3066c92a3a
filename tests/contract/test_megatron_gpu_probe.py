"""The GPU probe (``scripts/megatron_gpu_probe.py``, issue N) on this CPU host: the worker's bf16 path
(bf16 weights, float32 AdamW masters) against a bf16 engine, and the float32 control.

On the lent H200 it measured a gap of 0.0131-0.0137 in bf16 and 4e-5 in float32 (docs/benchmarks.md, "GPU");
here the CPU's bf16 kernels give about the same (0.012-0.014). What this pins: the bf16 gap is bf16's
(under the goal, and far above the float32 control: a weight mapped wrongly would put both high), each
update reaches the engine through the export and a reload from disk, and the probe makes its weights from
the files that travel (no ``model.safetensors``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.contract.test_megatron_vl import megatron_python
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["megatron_python", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.model, pytest.mark.slow]

PROBE = Path(__file__).resolve().parents[2] / "scripts/megatron_gpu_probe.py"


def probe(python: str, files: Path, report: Path, *args: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [python, str(PROBE), str(files), "--device", "cpu", "--group", "4", "--tokens", "12"]
    done = subprocess.run(
        [*command, "--report", str(report), *args], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text())


def test_bf16_gap_is_roundings_and_updates_reach_the_engine(
    megatron_python: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    for src in tiny_model_dir.iterdir():
        if src.is_file() and src.suffix != ".safetensors":
            shutil.copyfile(src, files / src.name)

    bf16 = probe(megatron_python, files, tmp_path / "bf16.json", "--steps", "2")
    fp32 = probe(megatron_python, files, tmp_path / "fp32.json", "--steps", "1", "--dtype", "float32")

    assert [s["step"] for s in bf16["steps"]] == [1, 2]
    for step in bf16["steps"]:
        assert 1e-3 < step["logprob_gap"] <= 0.02, step  # bf16's rounding: above the control, under the goal
        assert step["update_shift"] > 0.01, step  # the engine's logprobs moved with the exported update
        assert step["replies"] == 8 and step["reply_tokens"] == 8 * 12, step
    (control,) = fp32["steps"]
    assert control["logprob_gap"] < 2e-4, control
    assert control["update_shift"] > 0.01, control
