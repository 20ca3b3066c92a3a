"""A sample's images as the model takes them: bytes from the blob store (claim-check), then the real
transformers image processor, in prompt order, exactly as the engine turned the same bytes into
``pixel_values`` and ``image_grid_thw``. And, before a group is queued, whether each of its screenshots
is one the step can take (``stored_image``)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from cua_stream.blobs import BlobStore
from cua_stream.errors import BlobCorrupted, BlobNotFound
from cua_stream.events import ImageRef
from cua_stream.image_bytes import MAX_IMAGE_PIXELS


def pixel_inputs(refs: Sequence[ImageRef], blobs: BlobStore, image_processor: Any) -> tuple[Any, Any]:
    """(pixel_values, image_grid_thw) for ``refs`` ((None, None) without images). The store checks each
    blob's hash on read, so a corrupted screenshot fails here instead of training on other pixels."""
    if not refs:
        return None, None
    from PIL import Image

    images = [Image.open(io.BytesIO(blobs.get(ref.sha256))) for ref in refs]
    out = image_processor(images=images, return_tensors="pt")
    grid = out["image_grid_thw"]
    expected = [list(ref.grid_thw) for ref in refs if ref.grid_thw is not None]
    if len(expected) == len(refs) and grid.tolist() != expected:
        raise ValueError(f"image grids {grid.tolist()} differ from the recorded {expected}")
    return out["pixel_values"], grid


def stored_image(sha256: str, blobs: BlobStore) -> tuple[int, int] | str:
    """The stored screenshot's (width, height), or why ``pixel_inputs`` could not take it: not in the
    store, not the bytes its hash names, not an image, over the pixel limit, or bytes that do not
    decode. Any other failure is the store's (it is down), not the image's: it propagates.

    Cheaper than the step's decode: a PNG's chunks are checked through IEND (their CRCs: a cut or
    corrupted PNG fails) and a WebP is parsed whole when opened, 0.5 ms each where a decode of a 720p
    screenshot takes 20-40; other formats (JPEG, GIF), whose cuts show only when decoded, are decoded."""
    try:
        data = blobs.get(sha256)
    except BlobNotFound:
        return "is not in the blob store"
    except BlobCorrupted:
        return "in the blob store does not match its hash"
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:  # before any decode
                return f"is {width}x{height}: over the limit of {MAX_IMAGE_PIXELS:,} pixels"
            if image.format == "PNG":
                image.verify()
            elif image.format != "WEBP":
                image.load()
    except Exception as e:  # the bytes are all Pillow reads: whatever it raises on them is theirs
        return f"does not decode ({type(e).__name__}: {e})"
    return width, height
