"""How many GPUs a model needs to train under the megatron backend, and in which layout: computed from
bytes per parameter, not measured (docs/tutorials/gpu.md prints ``sizing_table()``; a test keeps the page
equal to it).

Megatron's mixed precision keeps, per parameter: the bfloat16 weight (2 bytes), its float32 gradient
(4), a float32 master copy (4) and AdamW's two float32 moments (8): 18 bytes, the figure of Megatron's
distributed-optimizer guide. The distributed optimizer shards the last 12 over the data-parallel
replicas. A KL term keeps a frozen bfloat16 reference (2 more). Activations are left out: they depend on
the sequence length, the images and recomputation, so only a share of each GPU is given to the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

WEIGHT, GRADIENT, MASTER, ADAM = 2, 4, 4, 8
REFERENCE = 2
"""Bytes per parameter of each thing kept (a bfloat16 weight, a float32 gradient, master and 2 moments)."""

GPU_GB = 80.0
"""An H100's memory, in GB (10^9 bytes)."""
STATE_SHARE = 0.6
"""The share of a GPU's memory given to weights, gradients, optimizer and reference; the rest is left for
activations and the framework (an assumption, not a measurement)."""
MAX_TP = 8
"""Tensor parallelism stays inside one node (its all-reduces are per layer): 8 GPUs."""

MODEL_SIZES = {"Qwen3-VL-2B": 2e9, "Qwen3-VL-4B": 4e9, "Qwen3-VL-8B": 8e9, "Qwen3-VL-32B": 32e9}
"""Dense Qwen3-VL sizes, by their nominal parameter counts."""


def bytes_per_param(*, data_parallel: int = 1, distributed_optimizer: bool = False, kl: bool = True) -> float:
    """Training state per parameter on the GPU that holds it (before TP and PP split the parameters)."""
    sharded = (MASTER + ADAM) / (data_parallel if distributed_optimizer else 1)
    return WEIGHT + GRADIENT + sharded + (REFERENCE if kl else 0)


@dataclass(frozen=True)
class Sizing:
    model: str
    params: float
    gpus: int
    tensor: int
    pipeline: int
    gb_per_gpu: float


def sizing(model: str, params: float, *, kl: bool = True) -> Sizing:
    """The fewest GPUs (a power of two) whose share holds the model's training state, split by tensor
    parallelism first (up to a node's 8), then pipeline stages; one data-parallel replica."""
    gpus = 1
    while params * bytes_per_param(kl=kl) / gpus / 1e9 > GPU_GB * STATE_SHARE:
        gpus *= 2
    tensor = min(gpus, MAX_TP)
    return Sizing(model, params, gpus, tensor, gpus // tensor, params * bytes_per_param(kl=kl) / gpus / 1e9)


def sizing_table() -> str:
    """The sizing of ``MODEL_SIZES`` as a markdown table (computed, not measured)."""
    rows = [
        "| model | parameters | training state (GB) | GPUs (80 GB) | layout | GB per GPU |",
        "|---|---|---|---|---|---|",
    ]
    for model, params in MODEL_SIZES.items():
        s = sizing(model, params)
        total = params * bytes_per_param() / 1e9
        layout = f"TP={s.tensor} PP={s.pipeline}"
        rows.append(
            f"| {model} | {params / 1e9:g}B | {total:.0f} | {s.gpus} | {layout} | {s.gb_per_gpu:.0f} |"
        )
    return "\n".join(rows)
