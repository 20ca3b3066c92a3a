"""The megatron backend's parallel layout (``consumers/trainer/backends/megatron_layout.py``): a layout the
model cannot take is refused at the trainer's start, naming the field; data parallelism is what the
ranks leave over; torchrun's options follow the layout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from consumers.trainer.backends.megatron_layout import (
    ModelShape,
    ParallelLayout,
    device_layout_error,
    layout_error,
    torchrun_args,
)
from consumers.trainer.config import trainer_config
from cua_stream.errors import ConfigError

QWEN3_VL_LIKE = {
    "text_config": {"num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 6},
    "vision_config": {"num_heads": 6, "deepstack_visual_indexes": [0, 1]},
}
"""Heads 4 (key/value 2), 6 layers, a vision tower of 6 heads: each count divides differently."""

SHAPE = ModelShape.of_config(QWEN3_VL_LIKE)
ENV = [
    f"CUA_TRAINER_{name.upper()}" for name in ("backend", "device", "tensor_parallel_size", "nproc_per_node")
]


def test_the_shape_is_read_from_a_vl_configs_text_and_vision_parts_or_a_text_models_top_level() -> None:
    assert ModelShape(attention_heads=4, kv_heads=2, layers=6, vision_heads=6, deepstack=2) == SHAPE
    text_only = ModelShape.of_config({"num_attention_heads": 8, "num_hidden_layers": 3})
    assert text_only == ModelShape(attention_heads=8, kv_heads=8, layers=3, vision_heads=None)


def test_data_parallelism_is_the_ranks_over_one_copy_of_the_model() -> None:
    assert ParallelLayout().data == 1
    assert ParallelLayout(tensor=2, nproc_per_node=4).data == 2
    assert ParallelLayout(tensor=2, pipeline=2, nproc_per_node=4, nnodes=2).data == 2
    assert ParallelLayout(nproc_per_node=2).data == 2


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (
            ParallelLayout(tensor=3, nproc_per_node=3),
            "tensor_parallel_size: 3 does not divide the model's 4 attention heads",
        ),
        (
            ParallelLayout(tensor=4, nproc_per_node=4),
            "tensor_parallel_size: 4 does not divide the model's 2 key/value heads",
        ),
        (
            ParallelLayout(tensor=2, nproc_per_node=2),
            None,
        ),
        (
            ParallelLayout(pipeline=4, nproc_per_node=4),
            "pipeline_parallel_size: 4 does not divide the model's 6 layers",
        ),
        (
            ParallelLayout(tensor=2, pipeline=3, nproc_per_node=4),
            "nproc_per_node: 4 ranks .* not a multiple of .* = 6",
        ),
        (ParallelLayout(tensor=0), "tensor_parallel_size: must be >= 1, not 0"),
        (ParallelLayout(nnodes=2, nproc_per_node=2), "rdzv_endpoint: 2 nodes need a rendezvous endpoint"),
        (ParallelLayout(nnodes=2, nproc_per_node=2, rdzv_endpoint="h:29400"), None),
        (ParallelLayout(pipeline=3, nproc_per_node=6, distributed_optimizer=True), None),
    ],
)
def test_a_layout_the_model_cannot_take_is_named_by_its_field(
    layout: ParallelLayout, message: str | None
) -> None:
    error = layout_error(layout, SHAPE)
    if message is None:
        assert error is None
    else:
        assert error is not None
        assert error.startswith("trainer.")
        assert re.search(message, error), error


def test_the_vision_towers_heads_bound_tensor_parallelism_too() -> None:
    shape = ModelShape(attention_heads=8, kv_heads=8, layers=2, vision_heads=6)
    assert layout_error(ParallelLayout(tensor=4, nproc_per_node=4), shape) == (
        "trainer.tensor_parallel_size: 4 does not divide the model's 6 vision heads"
    )


def test_the_deepstack_layers_stay_on_the_first_pipeline_stage() -> None:
    """Measured: megatron-bridge's Qwen3-VL asserts it at build (the tiny model, 2 layers and 2 deepstack
    layers, at PP = 2: "the deepstack_visual_embeds should on the first pp-stage of language model")."""
    tiny = ModelShape(attention_heads=4, kv_heads=2, layers=2, vision_heads=2, deepstack=2)
    assert layout_error(ParallelLayout(pipeline=2, nproc_per_node=2), tiny) == (
        "trainer.pipeline_parallel_size: 2 leaves the first stage 1 of the model's 2 layers, and its 2 "
        "deepstack layers (vision features) must all be there"
    )
    assert (
        layout_error(ParallelLayout(pipeline=2, nproc_per_node=2), ModelShape(4, 2, 4, 2, deepstack=2))
        is None
    )
    assert layout_error(ParallelLayout(pipeline=3, nproc_per_node=3), SHAPE) is None  # 2 of 6 layers first


def test_more_ranks_than_gpus_on_a_node_is_refused_and_the_cpu_takes_any_number() -> None:
    layout = ParallelLayout(tensor=2, nproc_per_node=4)
    assert layout_error(layout, SHAPE) is None
    assert layout_error(layout, SHAPE, devices=4) is None
    assert layout_error(layout, SHAPE, devices=2) == "trainer.nproc_per_node: 4 ranks on a node with 2 GPUs"


def test_one_named_gpu_fits_one_rank() -> None:
    assert device_layout_error("cuda:1", ParallelLayout()) is None
    assert device_layout_error("cuda", ParallelLayout(nproc_per_node=2)) is None
    assert "trainer.device: 'cuda:1' names one GPU" in str(
        device_layout_error("cuda:1", ParallelLayout(nproc_per_node=2))
    )


def test_torchrun_runs_one_node_standalone_and_several_through_the_rendezvous() -> None:
    assert torchrun_args(ParallelLayout(nproc_per_node=2)) == [
        "--nproc_per_node=2",
        "--nnodes=1",
        "--standalone",
    ]
    assert torchrun_args(ParallelLayout(nproc_per_node=8, nnodes=2, rdzv_endpoint="head:29400")) == [
        "--nproc_per_node=8",
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=head:29400",
    ]


def test_the_trainer_refuses_at_start_a_layout_its_model_cannot_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_VL_LIKE))
    base = {"trainer": {"run_id": "r", "model_path": str(tmp_path), "backend": "megatron"}}
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    config = trainer_config(base, overrides={"tensor_parallel_size": 2, "nproc_per_node": 4})
    assert (config.layout.tensor, config.layout.data) == (2, 2)
    with pytest.raises(
        ConfigError, match="trainer.tensor_parallel_size: 3 does not divide the model's 4 attention heads"
    ):
        trainer_config(base, overrides={"tensor_parallel_size": 3, "nproc_per_node": 3})
    with pytest.raises(ConfigError, match="trainer.device: 'cuda:0' names one GPU"):
        trainer_config(base, overrides={"device": "cuda:0", "nproc_per_node": 2})
    with pytest.raises(ConfigError, match="need trainer.backend = 'megatron'"):
        trainer_config(base, overrides={"backend": "torch", "nproc_per_node": 2})
    monkeypatch.setenv("CUA_TRAINER_TENSOR_PARALLEL_SIZE", "4")
    monkeypatch.setenv("CUA_TRAINER_NPROC_PER_NODE", "4")
    with pytest.raises(
        ConfigError, match="trainer.tensor_parallel_size: 4 does not divide the model's 2 key/value"
    ):
        trainer_config(base)


def test_one_rank_needs_no_model_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default layout reads nothing: a checkpoint whose config.json lacks head counts still starts."""
    (tmp_path / "config.json").write_text("{}")
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    config = trainer_config({"trainer": {"run_id": "r", "model_path": str(tmp_path), "backend": "megatron"}})
    assert config.layout == ParallelLayout()
    with pytest.raises(ConfigError, match="trainer.model_path: no model shape"):
        trainer_config(
            {
                "trainer": {
                    "run_id": "r",
                    "model_path": str(tmp_path),
                    "backend": "megatron",
                    "nproc_per_node": 2,
                }
            }
        )


def test_the_megatron_backend_refuses_several_ranks_until_its_worker_runs_them(tmp_path: Path) -> None:
    """The layout is checked for the model at config time; the worker itself is one process yet: a
    multi-rank layout stops the backend before any process starts, not a one-rank run in its place."""
    from consumers.trainer.backends.megatron_vl_backend import MegatronVLBackend, WorkerError
    from cua_stream.blobs import LocalBlobStore

    with pytest.raises(WorkerError, match="2 ranks: the megatron worker runs one rank so far"):
        MegatronVLBackend(
            tmp_path, LocalBlobStore(tmp_path), layout=ParallelLayout(tensor=2, nproc_per_node=2)
        )
