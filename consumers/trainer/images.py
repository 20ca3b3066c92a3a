"""A sample's images as the model takes them: bytes from the blob store (claim-check), then the real
transformers image processor, in prompt order, exactly as the engine turned the same bytes into
``pixel_values`` and ``image_grid_thw``."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from cua_stream.blobs import BlobStore
from cua_stream.events import ImageRef


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
