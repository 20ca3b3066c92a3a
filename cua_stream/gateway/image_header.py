"""Image dimensions from the file header, for the formats screenshots come in (WebP, PNG, JPEG, GIF).

The gateway needs only an image's width and height to count its pad tokens. Pillow's ``Image.open`` on a
WebP builds an animation decoder (~0.5 ms per 1280x720 screenshot); reading the header is microseconds.
Anything not recognised here falls back to Pillow, and a unit test holds both to the same answer.
"""

from __future__ import annotations

import struct

SHORT_HEAD = 64
"""Enough bytes for the size of a WebP, PNG or GIF (fixed offsets below 30); a JPEG's may come after
metadata. ``dimensions`` of a prefix of at least this many bytes is None or the whole file's answer (it
reads fixed offsets below 30, or walks JPEG markers only as far as the prefix goes), so a caller may try
a short head first and a longer one only when that says None."""

# JPEG start-of-frame markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) read from the header, or None if the format is not one handled here."""
    try:
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data[:3] == b"\xff\xd8\xff":
            return _jpeg(data)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack("<HH", data[6:10])
    except (struct.error, IndexError):
        return None
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        i += 2 + length
    return None
