"""SGLang ``sampling_params`` for the reference engine: parsing, and drawing one token.

The engine implements the subset a policy rollout uses. Fields that would change the distribution and
that it does not implement (penalties, grammars, logit bias, ``n > 1``) are refused with the field
named, unless they carry their neutral value: silently ignoring them would make the recorded logprobs
lie about how the token was drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from cua_stream.engine.forward import token_logprobs

# Accepted and without effect here (text formatting SGLang applies to ``text``).
_NEUTRAL_IGNORED = frozenset({"spaces_between_special_tokens"})
# Unsupported unless equal to the neutral value given here.
_NEUTRAL_VALUES: dict[str, Any] = {
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "n": 1,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "logit_bias": None,
    "custom_params": None,
}


class SamplingError(ValueError):
    """An invalid or unsupported sampling parameter; the message names it (HTTP 400)."""


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: int | None = None

    @classmethod
    def from_request(cls, raw: Mapping[str, Any] | None) -> SamplingParams:
        values: dict[str, Any] = {}
        for key, value in (raw or {}).items():
            if key in _NEUTRAL_IGNORED:
                continue
            if key in _NEUTRAL_VALUES:
                if value not in (None, _NEUTRAL_VALUES[key]):
                    raise SamplingError(f"sampling_params.{key}={value!r} is not supported by this engine")
                continue
            if key not in cls.__dataclass_fields__:
                raise SamplingError(f"sampling_params.{key}: unknown sampling parameter")
            if value is not None:
                values[key] = value
        if isinstance(values.get("stop"), str):
            values["stop"] = (values["stop"],)
        try:
            params = cls(
                temperature=float(values.get("temperature", 1.0)),
                top_p=float(values.get("top_p", 1.0)),
                top_k=int(values.get("top_k", -1)),
                min_p=float(values.get("min_p", 0.0)),
                max_new_tokens=int(values.get("max_new_tokens", 128)),
                stop=tuple(str(s) for s in values.get("stop", ())),
                stop_token_ids=tuple(int(t) for t in values.get("stop_token_ids", ())),
                ignore_eos=bool(values.get("ignore_eos", False)),
                skip_special_tokens=bool(values.get("skip_special_tokens", True)),
                no_stop_trim=bool(values.get("no_stop_trim", False)),
                sampling_seed=None if values.get("sampling_seed") is None else int(values["sampling_seed"]),
            )
        except (TypeError, ValueError) as e:
            raise SamplingError(f"sampling_params: {e}") from None
        params.validate()
        return params

    def validate(self) -> None:
        if self.temperature < 0:
            raise SamplingError(f"sampling_params.temperature={self.temperature} must be >= 0")
        if not 0 < self.top_p <= 1:
            raise SamplingError(f"sampling_params.top_p={self.top_p} must be in (0, 1]")
        if self.top_k == 0 or self.top_k < -1:
            raise SamplingError(f"sampling_params.top_k={self.top_k} must be -1 (off) or >= 1")
        if not 0 <= self.min_p < 1:
            raise SamplingError(f"sampling_params.min_p={self.min_p} must be in [0, 1)")
        if self.max_new_tokens < 0:
            raise SamplingError(f"sampling_params.max_new_tokens={self.max_new_tokens} must be >= 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


def draw(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[int, float]:
    """Draw the next token from ``logits`` (vocab,); return it with its logprob (see forward.py)."""
    logp = token_logprobs(logits, params.temperature)
    if params.greedy:
        token = int(torch.argmax(logp))
        return token, float(logp[token])
    probs = logp.exp()
    if params.top_k > 0:
        kth = torch.topk(probs, min(params.top_k, probs.numel())).values[-1]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, 0) - sorted_probs  # mass strictly above each token
        sorted_probs[before > params.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    if params.min_p > 0:
        probs = torch.where(probs < params.min_p * probs.max(), torch.zeros_like(probs), probs)
    token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
    return token, float(logp[token])
