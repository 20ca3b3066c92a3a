"""megatron-bridge 0.6.2's Qwen3-VL without Transformer Engine (on a CPU host, or a GPU host without TE): what the worker
(``worker.py``, in the same venv) changes before it builds the model. TE's torch extension builds
only with CUDA, and megatron-bridge assumes it in four places (file:line in docs/tutorials/gpu.md):
the LoRA module's import, the TE layer specs, norm and linears of the Qwen3-VL provider and model, packed
(THD) attention, which megatron-core's local attention refuses, and the M-RoPE table's CUDA device.
Imports nothing of cua_stream's.
"""

from __future__ import annotations

import itertools
import sys
import types
import warnings
from typing import Any

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")  # megatron warns at import that Apex / TE / fused kernels are missing


def have_transformer_engine() -> bool:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except ImportError:
        return False
    return True


def stub_lora_layers() -> None:
    """megatron-bridge 0.6.2 imports ``transformer_engine.pytorch`` unconditionally in
    ``megatron/bridge/peft/lora_layers.py:20``, on the import path of ``AutoBridge`` (model_bridge ->
    peft_bridge -> canonical_lora -> lora_layers). LoRA is not used here: its module is replaced by one
    whose classes fail if ever built. Must run after megatron-core decided TE is absent."""
    name = "megatron.bridge.peft.lora_layers"
    stub = types.ModuleType(name)

    def missing(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"{attr}: megatron-bridge's LoRA needs Transformer Engine")

        cls = type(attr, (), {"__init__": refuse})
        setattr(stub, attr, cls)
        return cls

    stub.__getattr__ = missing  # type: ignore[method-assign]
    sys.modules[name] = stub


def import_bridge() -> Any:
    import megatron.core.extensions.transformer_engine  # noqa: F401  (sets HAVE_TE before the stub exists)

    if not have_transformer_engine():
        stub_lora_layers()
    from megatron.bridge import AutoBridge

    return AutoBridge


def segment_attention_class() -> type:
    """megatron-core's local ``DotProductAttention`` refuses packed sequences
    (``megatron/core/transformer/dot_product_attention.py:153``, "use TEDotProductAttention"); Qwen3-VL's
    vision tower always packs (one segment per image frame), and the packed trainer packs samples. This one
    attends within each ``cu_seqlens`` segment (causal or not, as the layer's mask type says)."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    class SegmentAttention(DotProductAttention):  # type: ignore[misc]
        def forward(  # type: ignore[override]
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            attention_mask: torch.Tensor | None,
            attn_mask_type: Any = None,
            attention_bias: torch.Tensor | None = None,
            packed_seq_params: Any = None,
        ) -> torch.Tensor:
            if packed_seq_params is None:
                return super().forward(query, key, value, attention_mask, attn_mask_type, attention_bias)
            # THD: (t, heads, dim), possibly with a batch axis of 1
            q, k, v = (x.reshape(x.shape[0], x.shape[-2], x.shape[-1]) for x in (query, key, value))
            if q.shape[1] != k.shape[1]:  # grouped-query attention: each key head serves a group
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
            causal = (attn_mask_type or self.attn_mask_type) in (
                AttnMaskType.causal,
                AttnMaskType.padding_causal,
            )
            bounds = packed_seq_params.cu_seqlens_q.tolist()
            parts = [
                F.scaled_dot_product_attention(
                    q[a:b].transpose(0, 1),
                    k[a:b].transpose(0, 1),
                    v[a:b].transpose(0, 1),
                    is_causal=causal,
                    scale=self.softmax_scale,
                ).transpose(0, 1)
                for a, b in itertools.pairwise(bounds)
            ]
            return torch.cat(parts).reshape(q.shape[0], 1, -1)

    return SegmentAttention


def use_local_modules(on_gpu: bool = False) -> None:
    """Where megatron-bridge 0.6.2's Qwen3-VL hard-codes Transformer Engine, megatron-core's local modules:
    the language layer spec (``qwen3_vl_provider.py:148``), the vision layer spec and the patch merger's
    norm and linears (``modelling_qwen3_vl/model.py:19-23, 305-310``). And megatron-core's M-RoPE table is
    made on ``torch.cuda.current_device()`` (``rotary_pos_embedding.py:305``): unless the model runs on a GPU
    (``on_gpu``), that answers "cpu"."""
    import megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model as vl_model
    import megatron.bridge.models.qwen_vl.qwen3_vl_provider as vl_provider
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.vision.vit_layer_specs import get_vit_layer_with_local_spec
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    attention = segment_attention_class()

    def language_spec(
        num_experts: Any = None, moe_grouped_gemm: bool = False, qk_layernorm: bool = False, **_: Any
    ) -> Any:
        spec = get_gpt_layer_local_spec(
            num_experts=num_experts,
            moe_grouped_gemm=moe_grouped_gemm,
            qk_layernorm=qk_layernorm,
            normalization="RMSNorm",
        )
        spec.submodules.self_attention.submodules.core_attention = attention
        return spec

    def vision_spec() -> Any:
        spec = get_vit_layer_with_local_spec()
        spec.submodules.self_attention.submodules.core_attention = attention
        return spec

    vl_provider.get_gpt_layer_with_transformer_engine_spec = language_spec
    vl_model.get_vit_layer_with_transformer_engine_spec = vision_spec
    vl_model.TENorm = WrappedTorchNorm
    vl_model.TEColumnParallelLinear = ColumnParallelLinear
    vl_model.TERowParallelLinear = RowParallelLinear
    if not on_gpu:
        torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
