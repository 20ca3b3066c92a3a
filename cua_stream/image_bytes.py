"""Image bytes in requests: one decoding rule, one size limit and one MIME sniffer, shared by the
session gateway and the reference engine, so neither accepts an image the other refuses.

The rule is strict base64 (RFC 4648 §4: the standard alphabet, ``=`` padding, nothing after it, no line
breaks), the form SGLang validates too. A lenient gateway in front of a strict engine answered 200 to
the session but 400 from the engine on the same bytes; a wrapped (MIME-style) encoder's output is
refused at the gateway with the reason instead.
"""

from __future__ import annotations

import binascii

from cua_stream.errors import ImageDataError

MAX_IMAGE_PIXELS = 1 << 25
"""33.5 Mpx: four times a 4K desktop. Larger images are refused from their header, before any pixel is
decoded (a 48 KB PNG can claim 20000x20000 1-bit pixels: 400 Mpx, 1.2 GB as RGB)."""

_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"WEBP", 8, "image/webp"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
)


def b64decode_strict(payload: bytes | str | memoryview) -> bytes:
    """The bytes of strict base64 ``payload`` (ImageDataError saying what is wrong otherwise)."""
    try:
        data = binascii.a2b_base64(payload, strict_mode=True)
    except (binascii.Error, ValueError) as e:
        raise ImageDataError(f"image data is not strict base64 ({e})") from None
    if not data:
        raise ImageDataError("image data is empty")
    return data


def data_url_payload(url: str) -> str:
    """The base64 part of ``data:<mime>;base64,<payload>`` (ImageDataError if it is not such a URL)."""
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise ImageDataError(f"not a base64 data URL: {url[:40]!r}")
    return payload


def sniff_mime(data: bytes) -> str | None:
    """The MIME type the bytes themselves declare (PNG, JPEG, WebP, GIF), or None."""
    for magic, offset, mime in _MAGIC:
        if data[offset : offset + len(magic)] == magic and (mime != "image/webp" or data[:4] == b"RIFF"):
            return mime
    return None


def check_pixels(width: int, height: int, limit: int = MAX_IMAGE_PIXELS) -> None:
    if width <= 0 or height <= 0:
        raise ImageDataError(f"image size {width}x{height} is not positive")
    if width * height > limit:
        raise ImageDataError(
            f"image of {width}x{height} = {width * height:,} pixels is over the limit of {limit:,}"
        )
