"""An image's patch grid as a Qwen-VL image processor makes it, from the image's size alone (pure).

The processor resizes an image with ``smart_resize`` (each side a multiple of ``patch_size *
merge_size``, the area within ``[min_pixels, max_pixels]``), cuts it into ``patch_size`` patches (its
``image_grid_thw`` row), and the model merges ``merge_size`` x ``merge_size`` of them into one image
token. The gateway counts an image's pads with it and the trainer checks them with it, both without
decoding pixels; a unit test holds it to the processor's own pixel path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Grid = tuple[int, int, int]
"""(t, h, w) in patches: a row of the processor's ``image_grid_thw``."""


@dataclass(frozen=True)
class ImageGeometry:
    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int

    @classmethod
    def of(cls, image_processor: Any) -> ImageGeometry:
        """The geometry of a transformers Qwen-VL image processor."""
        size = image_processor.size
        return cls(
            patch_size=int(image_processor.patch_size),
            merge_size=int(image_processor.merge_size),
            min_pixels=_size_field(size, "shortest_edge", "min_pixels"),
            max_pixels=_size_field(size, "longest_edge", "max_pixels"),
        )

    def grid_of(self, height: int, width: int) -> Grid:
        """The grid of an image of this size; ValueError for a size the processor refuses (an aspect
        ratio over 200)."""
        factor = self.patch_size * self.merge_size
        rh, rw = _smart_resize()(
            height, width, factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        return 1, rh // self.patch_size, rw // self.patch_size

    def tokens(self, grid: Grid) -> int:
        """The image tokens (pads in the prompt) a grid makes."""
        t, h, w = grid
        return t * h * w // self.merge_size**2


@functools.cache
def _smart_resize() -> Callable[..., tuple[int, int]]:
    """The processor's own resize arithmetic (imported once: transformers' lazy module lookup is slow)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    return smart_resize


def _size_field(size: Any, *names: str) -> int:
    for name in names:
        value = size.get(name) if isinstance(size, dict) else getattr(size, name, None)
        if value:
            return int(value)
    raise ValueError(f"image processor size has none of {names}")
