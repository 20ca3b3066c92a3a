"""SGLang ``sampling_params``: the subset a policy rollout uses, parsed strictly. No torch, so the gateway
validates a session's training sampling with the very rules the engine applies to each request.

Fields that would change the distribution and that the reference engine does not implement (penalties,
grammars, logit bias, ``n > 1``) are refused with the field named, unless they carry their neutral
value: silently ignoring them would make the recorded logprobs lie about how the token was drawn.
Types are checked, not coerced: ``top_k: 5.5`` is refused, never truncated to 5.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cua_stream.errors import SamplingError

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
MAX_SEED = 2**63 - 1
"""Largest ``sampling_seed`` (torch generators take a signed 64-bit seed)."""


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SamplingError(f"sampling_params.{name}={value!r}: expected a finite number")
    return float(value)


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SamplingError(f"sampling_params.{name}={value!r}: expected an integer")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SamplingError(f"sampling_params.{name}={value!r}: expected true or false")
    return value


def _strings(name: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
        raise SamplingError(f"sampling_params.{name}={value!r}: expected a string or a list of strings")
    return tuple(items)


def _integers(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise SamplingError(f"sampling_params.{name}={value!r}: expected a list of integers")
    return tuple(_integer(name, v) for v in value)


_PARSERS = {
    "temperature": _number,
    "top_p": _number,
    "top_k": _integer,
    "min_p": _number,
    "max_new_tokens": _integer,
    "stop": _strings,
    "stop_token_ids": _integers,
    "ignore_eos": _flag,
    "skip_special_tokens": _flag,
    "no_stop_trim": _flag,
    "sampling_seed": _integer,
}


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
        if raw is not None and not isinstance(raw, Mapping):
            raise SamplingError("sampling_params: expected an object")
        values: dict[str, Any] = {}
        for key, value in (raw or {}).items():
            if key in _NEUTRAL_IGNORED:
                continue
            if key in _NEUTRAL_VALUES:
                if value not in (None, _NEUTRAL_VALUES[key]):
                    raise SamplingError(f"sampling_params.{key}={value!r} is not supported by this engine")
                continue
            parse = _PARSERS.get(key)
            if parse is None:
                raise SamplingError(f"sampling_params.{key}: unknown sampling parameter")
            if value is not None:
                values[key] = parse(key, value)
        params = cls(**values)
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
        if any(t < 0 for t in self.stop_token_ids):
            raise SamplingError("sampling_params.stop_token_ids: ids must be >= 0")
        if self.sampling_seed is not None and not 0 <= self.sampling_seed <= MAX_SEED:
            raise SamplingError(
                f"sampling_params.sampling_seed={self.sampling_seed} must be in [0, 2**63 - 1]"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
