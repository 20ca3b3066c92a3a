"""Forward passes over a transformers Qwen3-VL model: prefill, one decode step, teacher-forced scoring.

Position ids are computed here and passed explicitly (text row + 3 M-RoPE rows) instead of letting the
model cache ``rope_deltas`` on itself: that cache is shared mutable state, and the engine and a scorer
may use one model for unrelated sequences.

Logprob distribution: every logprob the engine reports, and every recompute, is taken from the
**temperature-scaled, unfiltered** distribution ``log_softmax(logits / T)`` — the distribution the
token was drawn from before top-k/top-p/min-p truncation (what SGLang reports by default). ``T == 0``
(greedy) uses ``T = 1``. ``token_logprobs`` is the single place this is decided, and both the decode
loop and ``teacher_forced_logprobs`` go through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def token_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities over the vocabulary for ``logits`` (..., vocab) at ``temperature``."""
    scale = temperature if temperature > 0 else 1.0
    return torch.log_softmax(logits.float() / scale, dim=-1)


def _image_token_id(model: Any) -> int:
    return int(model.config.image_token_id)


def prompt_position_ids(
    model: Any, input_ids: torch.Tensor, image_grid_thw: torch.Tensor | None
) -> tuple[torch.Tensor, int]:
    """Position ids (4, 1, L) for a prompt (1, L), and the M-RoPE delta that later positions add."""
    length = input_ids.shape[1]
    text = torch.arange(length, dtype=torch.long).view(1, 1, -1)
    if image_grid_thw is None:
        return text.expand(4, 1, length), 0
    mm_types = (input_ids == _image_token_id(model)).int()
    vision, delta = model.model.get_rope_index(input_ids, mm_types, image_grid_thw=image_grid_thw)
    return torch.cat([text, vision], dim=0), int(delta.reshape(-1)[0])


def step_position_ids(position: int, delta: int, count: int = 1) -> torch.Tensor:
    """Position ids (4, 1, count) for text tokens at sequence offsets [position, position + count)."""
    text = torch.arange(position, position + count, dtype=torch.long).view(1, 1, -1)
    return torch.cat([text, (text + delta).expand(3, 1, count)], dim=0)


def forward(
    model: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    *,
    cache: Any = None,
    pixel_values: torch.Tensor | None = None,
    image_grid_thw: torch.Tensor | None = None,
    logits_to_keep: int = 1,
) -> tuple[torch.Tensor, Any]:
    """One forward pass; returns logits (1, kept, vocab) and the updated KV cache."""
    kwargs: dict[str, Any] = {}
    if pixel_values is not None:
        kwargs = {
            "pixel_values": pixel_values,
            "image_grid_thw": image_grid_thw,
            "mm_token_type_ids": (input_ids == _image_token_id(model)).int(),
        }
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=logits_to_keep,
        **kwargs,
    )
    return out.logits, out.cache


@torch.inference_mode()
def teacher_forced_logprobs(
    model: Any,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    *,
    temperature: float,
    pixel_values: torch.Tensor | None = None,
    image_grid_thw: torch.Tensor | None = None,
) -> list[float]:
    """Logprobs of ``completion_ids`` after ``prompt_ids`` from one full-sequence forward (no KV cache)."""
    if not completion_ids:
        return []
    ids = torch.tensor([[*prompt_ids, *completion_ids]], dtype=torch.long)
    positions, _ = prompt_position_ids(model, ids, image_grid_thw)
    n = len(completion_ids)
    logits, _ = forward(
        model,
        ids,
        positions,
        pixel_values=pixel_values,
        image_grid_thw=image_grid_thw,
        logits_to_keep=n + 1,
    )
    # logits[j] predicts token j+1: the n+1 kept rows end at the last completion token, whose row predicts
    # nothing we scored, so drop it.
    logp = token_logprobs(logits[0, :-1], temperature)
    targets = torch.tensor(list(completion_ids), dtype=torch.long).unsqueeze(1)
    return logp.gather(1, targets).squeeze(1).tolist()
