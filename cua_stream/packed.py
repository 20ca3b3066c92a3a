"""Token ids and logprobs travel as packed little-endian arrays (``TokenIds``: int32, ``Logprobs``:
float64) rather than msgpack lists: decoding 2,000 ints as a list costs ~120 µs against ~4 µs for the
packed form, and the bus benchmark holds us to raw-Kafka speed.

The msgspec hooks below put them on the wire: raw bytes in msgpack, lists in JSON (and bytes as hex).
"""

from __future__ import annotations

import array
import sys
from collections.abc import Iterable
from typing import Any

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("cua_stream.packed assumes a little-endian host for its packed arrays")


class TokenIds(array.array):
    """Token ids as a packed int32 array (a list-like sequence of ints)."""

    def __new__(cls, values: Iterable[int] = ()) -> TokenIds:
        return super().__new__(cls, "i", values)

    def __repr__(self) -> str:
        return f"TokenIds({self.tolist()!r})"


class Logprobs(array.array):
    """Per-token log-probabilities as a packed float64 array."""

    def __new__(cls, values: Iterable[float] = ()) -> Logprobs:
        return super().__new__(cls, "d", values)

    def __repr__(self) -> str:
        return f"Logprobs({self.tolist()!r})"


_ARRAY_TYPES: tuple[type[array.array], ...] = (TokenIds, Logprobs)


def enc_hook(obj: Any) -> Any:
    if isinstance(obj, array.array):
        return obj.tobytes()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def dec_hook(typ: type, obj: Any) -> Any:
    if typ in _ARRAY_TYPES:
        if isinstance(obj, (bytes, bytearray, list)):
            return typ(obj)  # array() takes bytes as frombytes() does, a list (from JSON) as extend() does
        out = typ()
        out.frombytes(obj)  # a memoryview: array() would iterate it as single bytes
        return out
    raise NotImplementedError(f"cannot decode {typ.__name__}")


def json_enc_hook(obj: Any) -> Any:
    if isinstance(obj, array.array):
        return obj.tolist()
    if isinstance(obj, bytes):
        return obj.hex()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")
