"""The tokenizer fast path gives exactly the Rust tokenizer's ids (the real Qwen vocabulary, offline)."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from cua_stream.gateway import fast_encoder
from cua_stream.gateway.fast_encoder import FastEncoder
from cua_stream.gateway.rendering import Renderer
from tests.unit.gateway_support import qwen_processor, renderer

__all__ = ["qwen_processor", "renderer"]


@pytest.fixture(scope="module")
def backend(qwen_processor: Any) -> Any:
    return qwen_processor.tokenizer.backend_tokenizer


@pytest.fixture(scope="module")
def fast(backend: Any) -> FastEncoder:
    encoder = FastEncoder.build(backend)
    assert encoder is not None, "the Qwen tokenizer must take the fast path"
    return encoder


def slow(backend: Any, text: str) -> list[int]:
    return backend.encode(text, add_special_tokens=False).ids


SPECIALS = ["<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_start|>", "<think>", "</tool_call>"]


def test_every_short_string_over_the_regex_classes_matches(backend: Any, fast: FastEncoder) -> None:
    # One or two characters of each class the split regex distinguishes, in every order up to length 4.
    alphabet = ["a", "Z", "s", "S", "'", "L", "7", " ", "\n", "\r", "\t", "\x0b", "\x0c", ".", "\x1c", "\x00"]
    for n in range(1, 5):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            assert fast.encode(text) == slow(backend, text), repr(text)


def test_random_ascii_with_added_tokens_matches(backend: Any, fast: FastEncoder) -> None:
    rng = random.Random(7)
    words = ["'s", "'LL", "'ve", "don't", "x=42", "3.14", "  ", "\n\n", "\r\n", "\t", "{", '"}', "...", "<|"]
    for _ in range(3000):
        parts: list[str] = []
        for _ in range(rng.randrange(1, 12)):
            roll = rng.random()
            if roll < 0.15:
                parts.append(rng.choice(SPECIALS))
            elif roll < 0.5:
                parts.append(rng.choice(words))
            else:
                parts.append("".join(chr(rng.randrange(128)) for _ in range(rng.randrange(1, 12))))
        text = "".join(parts)
        assert fast.encode(text) == slow(backend, text), repr(text)


def test_realistic_prompts_match(backend: Any, fast: FastEncoder) -> None:
    texts = [
        "<|im_start|>user\n" + "You are operating a computer. " * 40 + "Task: enable dark mode.<|im_end|>\n",
        '{"analysis": "The settings window is open.", "action": {"type": "click", "x": 12, "y": 999}}',
        "<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
        "<|im_start|>assistant\n",
        "",
        "<|im_end|>",
        "   ",
        "line one\n\n\n    indented(code) -> None:\n\treturn x**2  # 100%",
    ]
    for text in texts:
        assert fast.encode(text) == slow(backend, text), repr(text)
        assert fast.encode(text) == slow(backend, text), repr(text)  # and again, from the piece cache


def test_non_ascii_text_goes_to_the_tokenizer(backend: Any, fast: FastEncoder) -> None:
    for text in [
        "café",
        "e\u0301",
        "日本語のテキスト",
        "emoji 🖱️ click",
        "\u00a0nbsp",
        "\u2028",
        "Ω<|im_end|>",
    ]:
        assert fast.encode(text) == slow(backend, text), repr(text)


def test_a_full_piece_cache_is_cleared_and_stays_exact(
    backend: Any, fast: FastEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fast_encoder, "_MAX_CACHED_PIECES", 3)
    text = "alpha beta gamma delta epsilon zeta eta theta " + "x" * 1000 + " " * 500 + "y"
    assert fast.encode(text) == slow(backend, text)
    assert fast.encode(text) == slow(backend, text)
    assert len(fast._pieces) <= 3 and all(len(p) <= 64 for p in fast._pieces)


def test_the_renderer_encodes_like_the_tokenizer(renderer: Renderer, backend: Any) -> None:
    assert renderer._fast is not None
    text = "<|im_start|>assistant\nI'll click at (3, 4).<|im_end|>\n"
    assert renderer.encode(text) == slow(backend, text)


@pytest.mark.parametrize(
    "change",
    [
        lambda spec: spec.update(normalizer={"type": "NFKC"}),
        lambda spec: spec["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex=r"\s+|\S+"),
        lambda spec: spec["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True),
        lambda spec: spec["added_tokens"][1].update(lstrip=True),
    ],
    ids=["normalizer", "split regex", "prefix space", "stripping added token"],
)
def test_other_tokenizer_configurations_keep_the_rust_path(backend: Any, change: Any) -> None:
    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    change(spec)
    assert FastEncoder.build(Tokenizer.from_str(json.dumps(spec))) is None
