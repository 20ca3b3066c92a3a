"""Screenshots sized for Qwen3-VL.

Qwen3-VL's vision tower cuts an image into 16x16 patches and merges 2x2 of them into one visual token, so
the processor resizes every image to sides that are multiples of 32 within a pixel budget. Doing that
here, once, before the image enters the conversation has three effects:

- the gateway's processor sees a size it keeps as is, so the image the engine encodes is the image the
  agent sent (no second resample, and the same bytes hash to the same blob everywhere);
- a large desktop cannot blow the context: the pixel cap bounds the tokens per screenshot (1 token per
  32x32 block, so the default cap is at most 1,024 tokens, under Harbor's 1,300-token compaction
  estimate);
- the MIME label matches the bytes. Harbor labels screenshots by file suffix, so a sandbox without
  ``cwebp`` sends PNG bytes labelled ``image/webp``; the label is derived from the decoded image instead.

Coordinates are unaffected by the resize because the model works on the normalized 0..999 grid.
"""

from __future__ import annotations

import base64
import binascii
import io
import math

from PIL import Image

FACTOR = 32
"""Side granularity: 16-pixel patches merged 2x2 per visual token."""
DEFAULT_MAX_PIXELS = 1024 * FACTOR * FACTOR
"""1,048,576 pixels = at most 1,024 visual tokens; Harbor's 1024x900 desktop becomes 1024x896."""
MIN_PIXELS = 64 * FACTOR * FACTOR
"""65,536 pixels, the Qwen3-VL processor's own lower bound; smaller images (zoom crops) are scaled up."""
MAX_ASPECT = 50
"""Longest side over shortest at most: the Qwen processor refuses images past 200:1, and a zoom crop 1-2
pixels high would otherwise be scaled to a strip far beyond that. Past this, the short side is
stretched (a sliver that thin holds nothing to read at its own proportions)."""
WEBP_QUALITY = 80
"""The quality Harbor's runtime asks ``cwebp`` for."""

_MIME = {"PNG": "image/png", "WEBP": "image/webp", "JPEG": "image/jpeg"}


def fit_to_grid(
    width: int, height: int, *, max_pixels: int = DEFAULT_MAX_PIXELS, min_pixels: int = MIN_PIXELS
) -> tuple[int, int]:
    """The size closest to ``width`` x ``height`` with both sides multiples of ``FACTOR``, an area
    within [``min_pixels``, ``max_pixels``] and an aspect ratio of at most ``MAX_ASPECT``, keeping the
    aspect ratio as far as the grid allows (the Qwen processor's own resize, for ordinary sizes).

    Sizes that already conform come back unchanged, so applying this twice changes nothing.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if not FACTOR * FACTOR <= min_pixels <= max_pixels:
        raise ValueError(
            f"need {FACTOR * FACTOR} <= min_pixels <= max_pixels, got {min_pixels}, {max_pixels}"
        )
    w = max(FACTOR, round(width / FACTOR) * FACTOR)
    h = max(FACTOR, round(height / FACTOR) * FACTOR)
    if w * h > max_pixels:
        # Shrink by the area ratio, rounding down so the result stays under the cap.
        scale = math.sqrt(width * height / max_pixels)
        w = max(FACTOR, math.floor(width / scale / FACTOR) * FACTOR)
        h = max(FACTOR, math.floor(height / scale / FACTOR) * FACTOR)
    elif w * h < min_pixels:
        scale = math.sqrt(min_pixels / (width * height))
        w = math.ceil(width * scale / FACTOR) * FACTOR
        h = math.ceil(height * scale / FACTOR) * FACTOR
    if min_pixels <= w * h <= max_pixels and max(w, h) <= MAX_ASPECT * min(w, h):
        return w, h
    # Rounding fell outside the bounds (a cap just above the minimum, an extreme aspect ratio):
    # search the grid sizes that fit for the closest aspect ratio, then the area closest to the image's.
    area = min(max(width * height, min_pixels), max_pixels)
    return _closest_fitting(width / height, area, min_pixels, max_pixels)


def _closest_fitting(ratio: float, area: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    ratio = min(max(ratio, 1 / MAX_ASPECT), MAX_ASPECT)
    best: tuple[float, float, tuple[int, int]] | None = None
    for h in range(FACTOR, max_pixels // FACTOR + 1, FACTOR):
        # the widths that keep the area in bounds, and of those the two nearest the ratio
        low = max(FACTOR, math.ceil(min_pixels / h / FACTOR) * FACTOR)
        high = max_pixels // h // FACTOR * FACTOR
        if low > high:
            continue
        near = math.floor(h * ratio / FACTOR) * FACTOR
        for w in {min(max(near, low), high), min(max(near + FACTOR, low), high)}:
            if max(w, h) <= MAX_ASPECT * min(w, h):
                key = (abs(math.log(w / h / ratio)), abs(math.log(w * h / area)), (w, h))
                best = key if best is None or key < best else best
    if best is None:
        raise ValueError(f"no {FACTOR}-pixel grid size within [{min_pixels}, {max_pixels}] pixels")
    return best[2]


def fit_data_url(data_url: str, *, max_pixels: int = DEFAULT_MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> str:
    """``data_url`` (a base64 image) resized by ``fit_to_grid`` and labelled with its real MIME type.

    An image that already has the right size keeps its exact bytes. A resized one is re-encoded in its
    own format (WebP at Harbor's quality, PNG and JPEG as such); other formats become PNG.
    """
    header, sep, payload = data_url.partition(",")
    if not sep or not header.startswith("data:") or not header.endswith(";base64"):
        raise ValueError(f"not a base64 data URL: {data_url[:40]!r}")
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error as e:
        raise ValueError(f"screenshot data URL is not valid base64: {e}") from None
    with Image.open(io.BytesIO(raw)) as image:
        fmt = image.format if image.format in _MIME else "PNG"
        size = fit_to_grid(image.width, image.height, max_pixels=max_pixels, min_pixels=min_pixels)
        if size == image.size and image.format in _MIME:
            return f"data:{_MIME[fmt]};base64,{payload}"
        resized = image.convert("RGB").resize(size, Image.Resampling.BICUBIC)
    return f"data:{_MIME[fmt]};base64,{base64.b64encode(encode(resized, fmt)).decode('ascii')}"


def encode(image: Image.Image, fmt: str) -> bytes:
    """``image`` as a screenshot in format ``fmt`` is sent: WebP at Harbor's quality, PNG and JPEG as
    such, any other format as PNG."""
    out = io.BytesIO()
    if fmt == "WEBP":
        image.save(out, format="WEBP", quality=WEBP_QUALITY)
    else:
        image.save(out, format=fmt if fmt in _MIME else "PNG")
    return out.getvalue()
