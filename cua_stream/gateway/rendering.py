"""Prompt ids from messages: the template, the tokenizer, and image-pad expansion (pure CPU, no I/O).

A new root renders all its messages. A request that extends a call reuses that call's exact
prompt + completion ids and renders only what follows: a *glue* that closes the reply the way the
template would (``<|im_end|>`` unless the completion already ended with it, then ``\\n``), then the
appended messages with the generation prompt. Because the template renders each message
independently (see ``templates/qwen3_vl.jinja``), the glued delta equals the template's rendering of
the whole conversation everywhere except the sampled reply tokens, which are kept verbatim.

Each ``<|image_pad|>`` the template emits is expanded to the image's token count, computed with the
processor's own resize arithmetic (``smart_resize`` with the image processor's patch/merge sizes and
pixel bounds) from the image's dimensions: the same count the processor's pixel path yields (a unit
test holds both to it), without decoding pixels on the hot path.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from cua_stream.errors import ImageDataError
from cua_stream.events import ImageRef, TokenIds
from cua_stream.gateway import image_header
from cua_stream.gateway import template as chat_template
from cua_stream.gateway.fast_encoder import FastEncoder
from cua_stream.gateway.messages import ImagePart, Message
from cua_stream.gateway.refusal import bad_request
from cua_stream.image_bytes import check_pixels, sniff_mime
from cua_stream.image_grid import ImageGeometry


@dataclass(frozen=True, slots=True)
class PreparedImage:
    """An image of the new prompt part, measured from its header. ``stored`` (the full decode, the hash
    and the reference for the event) is left for later: the gateway runs it in a worker thread while
    the engine generates."""

    part: ImagePart
    width: int
    height: int
    grid_thw: tuple[int, int, int]
    """The processor's ``image_grid_thw`` row (patches, before the 2x2 merge)."""
    n_tokens: int

    def stored(self) -> tuple[bytes, ImageRef]:
        """The image's bytes (for the blob store) and its reference (for the event). The MIME type is
        the one the bytes declare, not the data URL's label (Harbor labels by file suffix)."""
        data = self.part.data()
        ref = ImageRef(
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            width=self.width,
            height=self.height,
            mime=sniff_mime(data) or _pillow_mime(data),
            grid_thw=self.grid_thw,
        )
        return data, ref


@dataclass(frozen=True, slots=True)
class RenderedDelta:
    ids: TokenIds
    images: tuple[PreparedImage, ...]


class Renderer:
    def __init__(self, tokenizer: Any, image_processor: Any, template: jinja2.Template | None = None) -> None:
        self.tokenizer = tokenizer
        self._encoder = tokenizer.backend_tokenizer  # the Rust tokenizer: half the per-call overhead
        # The same ids several times faster where provably equal (see fast_encoder), else None.
        self._fast = FastEncoder.build(self._encoder)
        self.template = template or chat_template.compile_template(chat_template.template_source())
        self.image_processor = image_processor
        ids = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|image_pad|>"])
        self.im_end_id, self.image_pad_id = int(ids[0]), int(ids[1])
        self.geometry = ImageGeometry.of(image_processor)
        self.special_ids = frozenset(int(i) for i in tokenizer.all_special_ids)

    @classmethod
    def from_pretrained(cls, path: str, template_source: str | None = None) -> Renderer:
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(path)
        template = chat_template.compile_template(template_source) if template_source else None
        return cls(processor.tokenizer, processor.image_processor, template)

    # -- images ---------------------------------------------------------------------------------------

    def grid_of(self, height: int, width: int) -> tuple[int, int, int]:
        """The processor's ``image_grid_thw`` row (t, h, w in patches) for an image of this size."""
        return self.geometry.grid_of(height, width)

    def prepare_image(self, part: ImagePart) -> PreparedImage:
        size = (
            image_header.dimensions(part.head(image_header.SHORT_HEAD))  # one base64 line, not 4 KB
            or image_header.dimensions(part.head())
            or image_header.dimensions(data := part.data())
        )
        width, height = size or _pillow_dimensions(data)
        try:
            check_pixels(width, height)
        except ImageDataError as e:
            raise bad_request(f"image_url: {e}") from None
        try:
            grid = self.grid_of(height, width)
        except ValueError as e:  # extreme aspect ratios
            raise bad_request(f"image_url: {e}") from None
        return PreparedImage(part, width, height, grid, self.geometry.tokens(grid))

    # -- text -----------------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        if self._fast is not None:
            return self._fast.encode(text)
        return self._encoder.encode(text, add_special_tokens=False).ids

    def glue_after(self, completion_ids: Sequence[int]) -> str:
        """What the template puts after a reply's content, less what the completion already holds."""
        return "\n" if completion_ids and completion_ids[-1] == self.im_end_id else "<|im_end|>\n"

    def render_text(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        return chat_template.render(
            [m.for_template() for m in messages],
            add_generation_prompt=add_generation_prompt,
            template=self.template,
        )

    def render_delta(
        self, messages: Sequence[Message], *, after_completion: Sequence[int] | None
    ) -> RenderedDelta:
        """Ids of ``messages`` with the generation prompt, preceded by the glue that closes the parent's
        reply when ``after_completion`` (the parent's completion ids) is given."""
        text = self.render_text(messages, add_generation_prompt=True)
        if after_completion is not None:
            text = self.glue_after(after_completion) + text
        images = tuple(self.prepare_image(p) for m in messages for p in m.images())
        return RenderedDelta(self.expand_image_pads(self.encode(text), [i.n_tokens for i in images]), images)

    def expand_image_pads(self, ids: Sequence[int], counts: Sequence[int]) -> TokenIds:
        """Replace the k-th ``<|image_pad|>`` with ``counts[k]`` pads (the processor's expansion)."""
        ids = ids if isinstance(ids, list) else list(ids)
        out = TokenIds()
        pad = self.image_pad_id
        one_pad = TokenIds((pad,))
        start = 0
        for count in counts:
            i = _find(ids, pad, start)
            if i < 0:
                raise bad_request("the rendered prompt holds fewer image placeholders than images")
            out.extend(ids[start:i])
            out.extend(one_pad * count)  # array to array: a memcpy, not one conversion per int
            start = i + 1
        if _find(ids, pad, start) >= 0:
            raise bad_request("the rendered prompt holds more image placeholders than images")
        out.extend(ids[start:])
        return out

    def render_full(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> TokenIds:
        """The whole conversation rendered from scratch (the mismatch reference and the benchmark's
        re-render baseline)."""
        text = self.render_text(messages, add_generation_prompt=add_generation_prompt)
        counts = [self.prepare_image(p).n_tokens for m in messages for p in m.images()]
        return self.expand_image_pads(self.encode(text), counts)


def _find(ids: list[int], tok: int, start: int) -> int:
    """Index of ``tok`` in ``ids`` from ``start``, or -1 (``list.index`` scans in C: prompts are mostly text)."""
    try:
        return ids.index(tok, start)
    except ValueError:
        return -1


def _pillow_dimensions(data: bytes) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size
    except (UnidentifiedImageError, OSError) as e:
        raise bad_request(f"image_url: not a decodable image ({e})") from None


def _pillow_mime(data: bytes) -> str:
    """The MIME type of an image in a format ``sniff_mime`` does not know (Pillow reads the header)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            return Image.MIME.get(img.format or "", "application/octet-stream")
    except (UnidentifiedImageError, OSError) as e:
        raise bad_request(f"image_url: not a decodable image ({e})") from None
