"""A retrain on the megatron backend (megatron-bridge's Qwen3-VL in its worker, on the CPU): a run trained
by it, retrained with nothing changed, gives the same steps (loss and grad norm) and the same weights
after every step, within the backend's parity tolerance against itself (measured: identical)."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest
import torch

from consumers.trainer.checkpoint import weights_name
from consumers.trainer.daemon import Trainer
from cua_stream.config import BusConfig
from tests.conftest import _create_topics
from tests.contract.test_megatron_vl import megatron_python
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_inspect_step import RUN
from tests.integration.test_retrain import Run, invoke, publish, records, run_config, weights

__all__ = ["megatron_python", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]


def test_a_megatron_run_retrained_with_nothing_changed_gives_its_steps_again(
    megatron_python: str,
    kafka_bootstrap: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUA_MEGATRON_PYTHON", megatron_python)
    bus = BusConfig(
        bootstrap_servers=kafka_bootstrap, topic_prefix=f"t-{uuid.uuid4().hex[:10]}", episode_partitions=2
    )
    anyio.run(_create_topics, bus)
    anyio.run(publish, bus)
    config = run_config(bus, tiny_model_dir, tmp_path, max_steps=2, backend="megatron")

    async def train() -> None:
        with anyio.fail_after(600):
            await Trainer(config).run()

    anyio.run(train)
    steps, _ = anyio.run(records, bus, RUN)
    run = Run(bus, config, steps, [], tmp_path)
    new = f"{RUN}-again"
    code, output = invoke(run, "--from", RUN, "--run-id", new, "--checkpoint-dir", str(tmp_path / "new"))
    assert code == 0, output
    print(output)
    again, (record,) = anyio.run(records, bus, new)
    assert record.settings["backend"] == "megatron" and record.changed == {}
    assert [s.step for s in again] == [s.step for s in steps] == [1, 2]
    for mine, theirs in zip(again, steps, strict=True):
        assert mine.group_ids == theirs.group_ids
        assert mine.loss == pytest.approx(theirs.loss, rel=1e-6)
        assert mine.metrics["grad_norm"] == pytest.approx(theirs.metrics["grad_norm"], rel=1e-6)
        a, b = (
            weights(tmp_path / "new" / weights_name(mine.step)),
            weights(tmp_path / "ckpt" / weights_name(theirs.step)),
        )
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=1e-7) for k in a)
