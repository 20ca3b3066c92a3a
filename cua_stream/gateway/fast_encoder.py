"""An exact, faster path for the gateway's tokenizer calls (Qwen2-family byte-level BPE; pure, no I/O).

Why: ``tokenizers``' ``Tokenizer.encode`` spends ~1.5 µs per word on this tokenizer, almost all of it in
the pipeline around the BPE model (pre-tokenizer regex, offset bookkeeping), so computer-1's long first
prompt costs about half a millisecond of a turn. The same ids come out of the same steps done here:

1. the text is split at the added tokens, leftmost-longest, as ``tokenizers``' added vocabulary does
   (every added token must be ``normalized=False`` without strip/single-word options: matched verbatim);
2. the NFC normalizer is the identity on ASCII text, which is the only text taken here (anything else
   goes to the Rust tokenizer unchanged);
3. each segment is split with the pre-tokenizer's regex written with ASCII classes (``\\p{L}`` is
   ``[A-Za-z]``, ``\\p{N}`` is ``[0-9]``, ``\\s`` is ``[\\t\\n\\v\\f\\r ]``), which on ASCII input matches
   what Oniguruma matches with the Unicode classes (held to it by a unit test);
4. each piece is byte-level mapped (the table is read from ``tokenizers``' own ``ByteLevel``) and given to
   the tokenizer's own BPE model, as the pipeline does; its ids are cached per piece.

``FastEncoder.build`` accepts only a tokenizer whose configuration is exactly the one this reasoning
covers, and only once it reproduces the Rust tokenizer on a probe set; otherwise it returns None and the
caller keeps the Rust tokenizer.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

log = logging.getLogger(__name__)

QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
"""The Split regex of the Qwen2 tokenizers (Qwen2 to Qwen3-VL), the one rewritten below."""

_L, _N, _S = "A-Za-z", "0-9", r"\t\n\x0b\x0c\r "
_ASCII_SPLIT = re.compile(
    rf"'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n{_L}{_N}]?[{_L}]+|[{_N}]"
    rf"| ?[^{_S}{_L}{_N}]+[\r\n]*|[{_S}]*[\r\n]+|[{_S}]+(?![^{_S}])|[{_S}]+"
)
"""``QWEN2_SPLIT_PATTERN`` for ASCII input. Every ASCII character is matched by some branch, so the
matches tile the text (``Isolated`` keeps no unmatched gaps to worry about)."""

_MAX_CACHED_PIECES = 200_000
_MAX_CACHED_LENGTH = 64
"""Bounds on the piece cache (~30 MB at worst): longer pieces (a run of spaces, a base64 blob in a text)
are not cached, and the cache is cleared when full."""

PROBES: tuple[str, ...] = (
    "".join(chr(i) for i in range(128)),
    "<|im_start|>user\nYou are operating a computer. Task: open the settings page.<|im_end|>\n",
    "<|im_start|>assistant\n",
    '{"analysis": "step 12", "action": {"type": "click", "x": 640, "y": 200}}<|im_end|>',
    "<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n",
    "I'm here; it's 12:30, we'LL see... they've DONE it\r\n\r\n  \t\x0b\x0c  x  \n\n",
    "<|im_end|><|im_end|>x<|im_start|><|im_start|",
    "  leading and trailing spaces   ",
    "\x00\x01\x1c\x1f\x7f 123456 7.5e-3 $%&*()[]{}",
)
"""Probe texts the fast path must reproduce before it is used (added tokens are probed on top)."""


class FastEncoder:
    """``encode(text)`` gives the ids of ``backend.encode(text, add_special_tokens=False).ids``."""

    def __init__(self, backend: Any, added: dict[str, int], byte_map: dict[int, str]) -> None:
        """``added``: every added token → its id; ``byte_map``: ASCII byte → its byte-level character."""
        self._backend = backend
        self._model = backend.model
        self._added = added
        # Longest first: at the leftmost match the longest added token wins, like aho-corasick's
        # leftmost-longest. The capture group keeps the tokens in ``split``'s output.
        alternatives = "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
        self._split_added = re.compile(f"({alternatives})") if added else None
        self._byte_level = str.maketrans({chr(b): c for b, c in byte_map.items()})
        self._pieces: dict[str, list[int]] = {}

    @classmethod
    def build(cls, backend: Any) -> FastEncoder | None:
        """A fast encoder equivalent to ``backend`` (a ``tokenizers.Tokenizer``), or None."""
        try:
            reason = _unsupported(backend)
        except Exception as e:  # an unexpected tokenizers API: keep the Rust path
            reason = f"cannot inspect the tokenizer ({type(e).__name__}: {e})"
        if reason:
            log.info("tokenizer fast path disabled: %s", reason)
            return None
        from tokenizers import pre_tokenizers

        level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        byte_map = {b: level.pre_tokenize_str(chr(b))[0][0] for b in range(128)}
        added = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
        encoder = cls(backend, added, byte_map)
        tokens = "".join(added)
        for text in (*PROBES, tokens, "a" + "b ".join(added) + "c"):
            if encoder.encode(text) != backend.encode(text, add_special_tokens=False).ids:
                log.warning("tokenizer fast path disabled: it differs from the tokenizer on %r", text)
                return None
        encoder._pieces.clear()
        return encoder

    def encode(self, text: str) -> list[int]:
        """The ids ``backend.encode(text, add_special_tokens=False)`` gives."""
        if not text.isascii():
            return self._backend.encode(text, add_special_tokens=False).ids
        if self._split_added is None:
            return self._encode_segment(text)
        ids: list[int] = []
        # re.split with one group: text segments at even indices, added tokens at odd ones.
        for i, part in enumerate(self._split_added.split(text)):
            if i % 2:
                ids.append(self._added[part])
            elif part:
                ids += self._encode_segment(part)
        return ids

    def _encode_segment(self, text: str) -> list[int]:
        ids: list[int] = []
        pieces = self._pieces
        for piece in _ASCII_SPLIT.findall(text):
            cached = pieces.get(piece)
            if cached is None:
                cached = [t.id for t in self._model.tokenize(piece.translate(self._byte_level))]
                if len(piece) <= _MAX_CACHED_LENGTH:
                    if len(pieces) >= _MAX_CACHED_PIECES:
                        pieces.clear()
                    pieces[piece] = cached
            ids += cached
        return ids


def _unsupported(backend: Any) -> str | None:
    """Why ``backend`` is outside what the fast path reproduces, or None if it is inside."""
    if type(backend.model).__name__ != "BPE" or backend.model.dropout:
        return "the model is not a deterministic BPE"
    if getattr(backend, "encode_special_tokens", False):
        return "special tokens are encoded as text"
    normalizer = _state(backend.normalizer)
    if normalizer not in (None, {"type": "NFC"}):
        return f"normalizer {normalizer}"
    pre = _state(backend.pre_tokenizer)
    steps = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else []
    if (
        len(steps) != 2
        or steps[0]
        != {
            "type": "Split",
            "pattern": {"Regex": QWEN2_SPLIT_PATTERN},
            "behavior": "Isolated",
            "invert": False,
        }
        or steps[1].get("type") != "ByteLevel"
        or steps[1].get("add_prefix_space")
        or steps[1].get("use_regex")
    ):
        return f"pre-tokenizer {pre}"
    post = _state(backend.post_processor)
    if post is not None and post.get("type") not in ("TemplateProcessing", "ByteLevel"):
        return f"post-processor {post.get('type')}"  # add_special_tokens=False: these add nothing
    for token in backend.get_added_tokens_decoder().values():
        if token.normalized or token.lstrip or token.rstrip or token.single_word:
            return f"added token {token.content!r} is not matched verbatim"
    return None


def _state(component: Any) -> dict[str, Any] | None:
    return None if component is None else json.loads(component.__getstate__())
