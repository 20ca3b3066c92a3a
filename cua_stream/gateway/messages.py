"""Chat messages in canonical form: what the template renders, and what parent matching compares.

Two messages are equal exactly when they render to the same prompt: role plus content parts, with
adjacent text parts merged (``"ab"`` and ``[{"text": "a"}, {"text": "b"}]`` render alike) and images
compared by their full data URL (as its canonical JSON literal). Fields the template ignores (``name``, ``detail``, a null ``tool_calls``)
are ignored here too. What the template cannot render (tools, tool calls, roles other than
system/user/assistant, remote image URLs) is refused rather than silently dropped, because the model
would then see a different prompt than the client thinks.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cua_stream.errors import ImageDataError
from cua_stream.gateway.refusal import bad_request
from cua_stream.image_bytes import b64decode_strict

ROLES = frozenset({"system", "user", "assistant"})
_DATA_URL_HEAD = re.compile(rb'"data:[\w.+-]+/[\w.+-]+;base64,')
_TAIL = 192  # bytes of an image URL folded into the cheap key (the full URL is compared later)


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image as the client sent it: a ``data:<mime>;base64,<bytes>`` URL, kept as the JSON string
    literal it arrived as (quotes included). Every request carries every screenshot of the history;
    keeping them undecoded makes reading a request ~3x cheaper, and the literal goes into the engine
    request as it is."""

    json: bytes

    @classmethod
    def from_url(cls, url: str) -> ImagePart:
        return cls(msgspec.json.encode(url))

    @property
    def url(self) -> str:
        return msgspec.json.decode(self.json)

    def head(self, n: int = 4096) -> bytes:
        """About the first ``n`` bytes of the image (enough for its header), without decoding the rest."""
        start = self.json.index(b",") + 1
        end = start + (n + 2) // 3 * 4
        if b"\\" in self.json[:end]:  # JSON escapes in the way: decode it all
            return self.data()[:n]
        try:
            return binascii.a2b_base64(memoryview(self.json)[start:end])
        except (binascii.Error, ValueError):
            return b""  # the full decode reports what is wrong

    def data(self) -> bytes:
        """The image's bytes, decoded by the one rule the engine applies too (strict base64); what is
        not an image is refused when its header is read."""
        try:
            if b"\\" in self.json:  # JSON escapes: decode the string first
                return b64decode_strict(self.url.partition(",")[2])
            return b64decode_strict(memoryview(self.json)[self.json.index(b",") + 1 : -1])
        except ImageDataError as e:
            raise bad_request(f"image_url: {e}") from None


Part = str | ImagePart


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    parts: tuple[Part, ...]
    _key: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Computed once: a message of the history is matched again on every later turn, and the
        # request-prefix reuse hands the same Message objects to those turns.
        key = hash(
            (self.role, *(p if isinstance(p, str) else (len(p.json), p.json[-_TAIL:]) for p in self.parts))
        )
        object.__setattr__(self, "_key", key)

    @property
    def text(self) -> str:
        return "".join(p for p in self.parts if isinstance(p, str))

    def images(self) -> list[ImagePart]:
        return [p for p in self.parts if isinstance(p, ImagePart)]

    def cheap_key(self) -> int:
        """A hash that is cheap for large images (length and tail of the URL); equal messages have equal
        keys, and candidates with equal keys are then compared in full."""
        return self._key

    def for_template(self) -> dict[str, Any]:
        content = [
            {"type": "text", "text": p} if isinstance(p, str) else {"type": "image"} for p in self.parts
        ]
        return {"role": self.role, "content": content}


def assistant_reply(text: str) -> Message:
    return Message("assistant", (text,) if text else ())


# -- the wire shape (decoded by msgspec in C; image URLs stay raw JSON) -------------------------------


class WireImageUrl(msgspec.Struct):
    url: msgspec.Raw


class WirePart(msgspec.Struct):
    type: Any = None
    text: Any = None
    image_url: WireImageUrl | None = None


class WireMessage(msgspec.Struct):
    role: Any = None
    content: str | list[WirePart] | None = None
    tool_calls: Any = None
    function_call: Any = None


def parse_messages(raw: Any) -> tuple[Message, ...]:
    """OpenAI chat ``messages`` (decoded JSON) → canonical messages; refuses (400) what the template
    cannot render. The gateway decodes request bodies straight into ``WireMessage``s instead."""
    try:
        wire = msgspec.json.decode(msgspec.json.encode(raw), type=list[WireMessage] | None)
    except msgspec.ValidationError as e:
        raise bad_request(f"messages: {e}") from None
    return canonical_messages(wire)


def canonical_messages(wire: list[WireMessage] | None, *, first_index: int = 0) -> tuple[Message, ...]:
    """``wire`` in canonical form; ``first_index`` is the position of ``wire[0]`` in the request (when
    the messages before it were read from an earlier request: see ``request_prefix``)."""
    if not wire:
        if first_index == 0:
            raise bad_request("messages: expected a non-empty list")
        return ()
    return tuple(_canonical(first_index + i, m) for i, m in enumerate(wire))


def _canonical(index: int, raw: WireMessage) -> Message:
    # Error locations are formatted only on error: this runs for every message of every request.
    role = raw.role
    if role not in ROLES:
        raise bad_request(f"messages[{index}].role: {role!r} is not supported (system, user, assistant)")
    if raw.tool_calls or raw.function_call:
        raise bad_request(f"messages[{index}]: tool calls are not supported by the session gateway")
    content = raw.content
    if content is None or isinstance(content, str):
        return Message(role, (content,) if content else ())
    parts: list[Part] = []
    for j, part in enumerate(content):
        item = _part(part)
        if item is None:
            raise bad_request(f"messages[{index}].content[{j}]: {_describe_bad_part(part)}")
        if isinstance(item, str):
            if not item:
                continue
            if parts and isinstance(parts[-1], str):
                parts[-1] += item
                continue
        parts.append(item)
    return Message(role, tuple(parts))


def _part(part: WirePart) -> Part | None:
    if part.type == "text":
        return part.text if isinstance(part.text, str) else None
    if part.type == "image_url" and part.image_url is not None:
        literal = bytes(part.image_url.url)
        if b"\\" in literal:  # escapes a client chose (such as an escaped slash): use canonical form
            literal = msgspec.json.encode(msgspec.json.decode(literal))
        if _DATA_URL_HEAD.match(literal):
            return ImagePart(literal)
    return None


def _describe_bad_part(part: WirePart) -> str:
    if part.type == "text":
        return "text: expected a string"
    if part.type == "image_url":
        return "image_url: expected a data:<mime>;base64,... URL"
    return f"type: {part.type!r} is not supported (text, image_url)"
