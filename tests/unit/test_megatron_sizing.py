"""The GPU sizing table (``consumers/trainer/backends/megatron_sizing.py``): bytes per parameter as
Megatron keeps them, the fewest GPUs that hold them, and docs/tutorials/gpu.md printing the table the
code computes."""

from __future__ import annotations

from pathlib import Path

from consumers.trainer.backends.megatron_sizing import (
    GPU_GB,
    STATE_SHARE,
    bytes_per_param,
    sizing,
    sizing_table,
)

ROOT = Path(__file__).resolve().parents[2]


def test_bytes_per_parameter_are_megatrons_18_and_the_distributed_optimizer_shards_12_of_them() -> None:
    assert bytes_per_param(kl=False) == 18  # bf16 weight 2, fp32 gradient 4, fp32 master 4, Adam 8
    assert bytes_per_param() == 20  # and the KL's bf16 reference
    assert bytes_per_param(kl=False, data_parallel=4, distributed_optimizer=True) == 6 + 12 / 4
    assert bytes_per_param(kl=False, data_parallel=4) == 18  # not sharded without it


def test_the_fewest_gpus_whose_share_holds_the_state_tensor_parallel_first_within_a_node() -> None:
    budget = GPU_GB * STATE_SHARE * 1e9
    small = sizing("s", budget / 20)  # exactly one GPU's share
    assert (small.gpus, small.tensor, small.pipeline) == (1, 1, 1)
    assert sizing("s", budget / 20 * 1.01).gpus == 2
    big = sizing("b", budget / 20 * 13)
    assert (big.gpus, big.tensor, big.pipeline) == (16, 8, 2)
    assert big.gb_per_gpu <= GPU_GB * STATE_SHARE


def test_the_gpu_page_prints_the_table_the_code_computes() -> None:
    page = (ROOT / "docs/tutorials/gpu.md").read_text()
    assert sizing_table() in page, (
        "regenerate: python -c 'from consumers.trainer.backends.megatron_sizing import sizing_table; print(sizing_table())'"
    )
    assert "computed, not measured" in page
