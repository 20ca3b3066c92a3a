"""Image headers against Pillow, the tiny tokenizer's real ids, and the daemon configs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from cua_stream.config import ConfigError, Secret, build
from cua_stream.engine.config import EngineConfig
from cua_stream.gateway.config import GatewayConfig
from cua_stream.gateway.image_header import SHORT_HEAD, dimensions
from cua_stream.models.tiny import QWEN_ADDED_TOKENS, VOCAB_SIZE
from tests.unit.gateway_support import qwen_processor

__all__ = ["qwen_processor"]  # fixture


def encoded(size: tuple[int, int], fmt: str, **options: Any) -> bytes:
    img = Image.new("RGB", size, (10, 200, 30))
    img.putpixel((0, 0), (255, 0, 0))
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


@pytest.mark.parametrize("size", [(1280, 720), (320, 180), (1, 1), (3000, 17)])
@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("WEBP", {"quality": 80}),
        ("WEBP", {"lossless": True}),
        ("WEBP", {"quality": 80, "exif": b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x00"}),  # VP8X
        ("PNG", {}),
        ("JPEG", {"quality": 85}),
        ("JPEG", {"quality": 85, "progressive": True}),
        ("GIF", {}),
    ],
)
def test_header_dimensions_agree_with_pillow(
    size: tuple[int, int], fmt: str, options: dict[str, Any]
) -> None:
    data = encoded(size, fmt, **options)
    assert dimensions(data) == Image.open(io.BytesIO(data)).size == size


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("WEBP", {"quality": 80}),
        ("WEBP", {"lossless": True}),
        ("WEBP", {"quality": 80, "exif": b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x00"}),
        ("PNG", {}),
        ("JPEG", {"quality": 85}),
        ("JPEG", {"quality": 85, "exif": b"Exif\x00\x00" + bytes(3000)}),  # the size after 3 KB
        ("GIF", {}),
    ],
)
def test_a_short_head_gives_the_size_or_nothing(fmt: str, options: dict[str, Any]) -> None:
    # The renderer reads SHORT_HEAD bytes first and more only when they do not reach the size.
    data = encoded((1280, 720), fmt, **options)
    for n in range(SHORT_HEAD, min(len(data), 4000) + 1):
        assert dimensions(data[:n]) in (None, (1280, 720)), n
    if fmt != "JPEG":
        assert dimensions(data[:SHORT_HEAD]) == (1280, 720)


def test_unknown_formats_fall_back() -> None:
    assert dimensions(encoded((20, 10), "BMP")) is None
    assert dimensions(b"RIFF\x00\x00\x00\x00WEBPVP8 ") is None
    assert dimensions(b"") is None


def test_tokenizer_has_the_real_qwen_special_ids(qwen_processor: Any) -> None:
    tok = qwen_processor.tokenizer
    ids = tok.convert_tokens_to_ids([text for text, _ in QWEN_ADDED_TOKENS])
    assert ids == list(range(151644, 151669))
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 151643 and len(tok) == VOCAB_SIZE
    assert tok.eos_token_id == 151645
    assert tok.encode("Hello", add_special_tokens=False) == [9707]
    # special tokens vanish from decoded replies; the tool and think markers are plain added tokens
    assert tok.decode([151644, 9707, 151657, 151645], skip_special_tokens=True) == "Hello<tool_call>"


def test_daemon_configs_build_from_file_env_and_flags(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    m = str(tmp_path)
    file_data = {"gateway": {"model_path": m, "engine_url": "http://e:30000", "port": 8100}}
    cfg = build(GatewayConfig, "gateway", file_data=file_data, env={"CUA_GATEWAY_API_KEY": "hunter2"})
    assert cfg.port == 8100 and isinstance(cfg.api_key, Secret) and cfg.api_key.reveal() == "hunter2"
    assert "hunter2" not in repr(cfg)
    with pytest.raises(ConfigError, match=r"gateway\.engine_url"):
        build(GatewayConfig, "gateway", overrides={"model_path": m, "engine_url": "e:1"}, env={})
    with pytest.raises(ConfigError, match=r"gateway\.prot: unknown field"):
        build(GatewayConfig, "gateway", file_data={"gateway": {"model_path": m, "prot": 1}}, env={})
    engine = build(EngineConfig, "engine", overrides={"model_path": m, "port": "31000"}, env={})
    assert engine.port == 31000 and engine.weight_version == "0"
    with pytest.raises(ConfigError, match=r"engine: .*model_path"):
        build(EngineConfig, "engine", env={})
    with pytest.raises(ConfigError, match=r"engine\.model_path: '/nowhere' is not a model directory"):
        build(EngineConfig, "engine", overrides={"model_path": "/nowhere"}, env={})
