"""The megatron backend's parallel layout: tensor-parallel (TP), pipeline-parallel (PP) and data-parallel
(DP) ranks under torchrun, and whether a model can take it.

Megatron splits each layer's attention heads (query and key/value alike, the vision tower's too) over the
TP ranks and the language model's layers over the PP stages; the ranks left over form DP replicas, so
``DP = world / (TP * PP)``. A layout that does not divide evenly fails deep inside megatron-core's model
build (an assert on a partition size) or, worse, after minutes of loading: ``layout_error`` says which
field is wrong before anything starts. It is pure: the model's shape comes in as ``ModelShape``, read from
the checkpoint's ``config.json`` by ``read_model_shape`` at the edge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """What a parallel layout must divide: attention heads, key/value heads, layers (language model) and
    the vision tower's heads (None: no vision tower)."""

    attention_heads: int
    kv_heads: int
    layers: int
    vision_heads: int | None = None
    deepstack: int = 0
    """Qwen3-VL's deepstack: vision features added to this many of the first language layers, which
    megatron-bridge 0.6.2 requires on the first pipeline stage (``modelling_qwen3_vl/model.py:360``)."""

    @classmethod
    def of_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """From a Hugging Face ``config.json``'s contents: a VL model's ``text_config`` and
        ``vision_config``, or a text model's top level."""
        text = config.get("text_config") or config
        vision = config.get("vision_config") or {}
        heads = int(text["num_attention_heads"])
        return cls(
            attention_heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            layers=int(text["num_hidden_layers"]),
            vision_heads=int(vision["num_heads"]) if "num_heads" in vision else None,
            deepstack=len(vision.get("deepstack_visual_indexes") or []),
        )


def read_model_shape(model_dir: str | Path) -> ModelShape:
    """The shape of the checkpoint in ``model_dir`` (its ``config.json``)."""
    return ModelShape.of_config(json.loads((Path(model_dir) / "config.json").read_text()))


@dataclass(frozen=True)
class ParallelLayout:
    """How many ranks, and how they split the model: ``nproc_per_node * nnodes`` ranks of which each
    ``tensor * pipeline`` hold one copy of the model."""

    tensor: int = 1
    pipeline: int = 1
    nproc_per_node: int = 1
    nnodes: int = 1
    distributed_optimizer: bool = False
    rdzv_endpoint: str = ""

    @property
    def world(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def data(self) -> int:
        """Data-parallel replicas: the ranks over the model's copies (``layout_error`` checks it divides)."""
        return self.world // (self.tensor * self.pipeline)


ONE_RANK = ParallelLayout()
"""The layout of one worker process: TP = PP = DP = 1 (the default)."""

FIELDS = {
    "tensor": "tensor_parallel_size",
    "pipeline": "pipeline_parallel_size",
    "nproc_per_node": "nproc_per_node",
    "nnodes": "nnodes",
}
"""The layout's attributes as the trainer's config fields name them."""


def layout_error(
    layout: ParallelLayout, shape: ModelShape, *, devices: int | None = None, section: str = "trainer"
) -> str | None:
    """What is wrong with ``layout`` for a model of ``shape``, naming the field; None: it fits.
    ``devices``: the GPUs on this node when the model trains on them (None: the CPU, any number of ranks)."""
    for attr, field in FIELDS.items():
        if getattr(layout, attr) < 1:
            return f"{section}.{field}: must be >= 1, not {getattr(layout, attr)}"
    tp, pp = layout.tensor, layout.pipeline
    split = [
        ("attention heads", shape.attention_heads),
        ("key/value heads", shape.kv_heads),
        ("vision heads", shape.vision_heads),
    ]
    for what, count in split:
        if count is not None and count % tp:
            return f"{section}.tensor_parallel_size: {tp} does not divide the model's {count} {what}"
    if shape.layers % pp:
        return f"{section}.pipeline_parallel_size: {pp} does not divide the model's {shape.layers} layers"
    if shape.deepstack > shape.layers // pp:
        return (
            f"{section}.pipeline_parallel_size: {pp} leaves the first stage {shape.layers // pp} of the "
            f"model's {shape.layers} layers, and its {shape.deepstack} deepstack layers (vision features) "
            "must all be there"
        )
    if layout.world % (tp * pp):
        return (
            f"{section}.nproc_per_node: {layout.world} ranks ({layout.nproc_per_node} per node x "
            f"{layout.nnodes} nodes) are not a multiple of tensor_parallel_size x pipeline_parallel_size "
            f"= {tp * pp}"
        )
    if devices is not None and layout.nproc_per_node > devices:
        return f"{section}.nproc_per_node: {layout.nproc_per_node} ranks on a node with {devices} GPUs"
    if layout.nnodes > 1 and not layout.rdzv_endpoint:
        return f"{section}.rdzv_endpoint: {layout.nnodes} nodes need a rendezvous endpoint (host:port)"
    return None


def device_layout_error(device: str, layout: ParallelLayout, section: str = "trainer") -> str | None:
    """``device`` beside a layout of several ranks: each rank takes its own GPU (``cuda:LOCAL_RANK``), so
    one named GPU fits one rank only."""
    if layout.nproc_per_node > 1 and device.startswith("cuda:"):
        return (
            f"{section}.device: {device!r} names one GPU and {layout.nproc_per_node} ranks run per node: use "
            "'cuda' (each rank takes the GPU of its local rank)"
        )
    return None


def torchrun_args(layout: ParallelLayout) -> list[str]:
    """torchrun's options for ``layout`` (before the script): one node by itself, several through the
    rendezvous endpoint (c10d)."""
    args = [f"--nproc_per_node={layout.nproc_per_node}", f"--nnodes={layout.nnodes}"]
    if layout.nnodes == 1 and not layout.rdzv_endpoint:
        return [*args, "--standalone"]
    return [*args, "--rdzv_backend=c10d", f"--rdzv_endpoint={layout.rdzv_endpoint}"]
