"""Reading only the new part of a chat request body (pure).

Every computer-1 request repeats the whole history, screenshots included (1.7 MB at 20 turns), and the
client serializes an unchanged message to the same bytes each time. So a session keeps the messages of
its last request together with their exact bytes (``KnownRequest``). The next body is compared with
those bytes message by message (``memcmp``: 0.04-0.1 ms for 1.7 MB, against ~1.5 ms to decode and
canonicalize it); the messages whose bytes match are taken as they were parsed then, and only the rest
of the body is decoded, as the *spliced* body: the known body's head (up to the ``[`` of its messages
array) followed by the bytes after the last matched message (and its comma).

Why that is exact: the matched bytes are identical, so a JSON parser is in the same state after them
in the known body and in the new one, inside the messages array after an element. Deleting those
elements (and the comma that follows them) leaves a body that parses exactly when the original does
(the one exception, a trailing comma ``..., ]``, is checked) and to the same fields, with the messages
array less its matched elements. A second top-level ``messages`` key would defeat that, so its absence is
checked. Whatever does not fit (a decode error included, so that its message names the original
positions) goes through the ordinary full decode instead.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from cua_stream.gateway import json_scan
from cua_stream.gateway.messages import ImagePart, Message

_COMMA, _CLOSE = 0x2C, 0x5D
_FIND_PREFIX = 48
"""Bytes of an image literal searched for when locating it in a body (then compared in full)."""


@dataclass(frozen=True, slots=True)
class KnownRequest:
    """A parsed request body, kept to read the session's next body faster."""

    head: bytes
    """The body up to and including the ``[`` that opens its messages array."""
    pieces: tuple[bytes, ...]
    """The body from there to the end of its last message, cut so that the image literals are the very
    bytes objects held by its image parts: keeping the bytes costs no memory beyond the messages."""
    piece_ends: tuple[int, ...]
    """``pieces[: piece_ends[i]]`` ends with message ``i``."""
    ends: tuple[int, ...]
    """Offset in the body right after message ``i``."""
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a decoded body's messages are: the first ``n_known`` are those of ``known``; the others
    end at the offsets ``ends``, the first starting at ``start``."""

    head: bytes
    known: KnownRequest | None
    n_known: int
    start: int
    ends: list[int]

    @property
    def prefix(self) -> tuple[Message, ...]:
        return self.known.messages[: self.n_known] if self.known else ()

    def remember(self, raw: bytes, new_messages: Sequence[Message]) -> KnownRequest:
        """The ``KnownRequest`` of ``raw``, whose messages after the known ones parsed to ``new_messages``."""
        pieces: list[bytes] = []
        piece_ends: list[int] = []
        ends: list[int] = []
        if self.known is not None and self.n_known:
            n_pieces = self.known.piece_ends[self.n_known - 1]
            pieces.extend(self.known.pieces[:n_pieces])
            piece_ends.extend(self.known.piece_ends[: self.n_known])
            ends.extend(self.known.ends[: self.n_known])
        start = self.start
        for end, message in zip(self.ends, new_messages, strict=True):
            _cut(raw, start, end, message.images(), pieces)
            piece_ends.append(len(pieces))
            ends.append(end)
            start = end
        return KnownRequest(
            self.head, tuple(pieces), tuple(piece_ends), tuple(ends), (*self.prefix, *new_messages)
        )


@dataclass(frozen=True, slots=True)
class Split:
    """A body whose first ``n_known`` messages are those of ``known``."""

    known: KnownRequest
    n_known: int
    spliced: bytes
    """The body without the known messages: decode this instead of the body."""

    def layout(self, raw: bytes) -> Layout | None:
        """Where the new messages are, once ``spliced`` has decoded (the scan needs valid JSON); None if
        the body holds a second top-level ``messages`` key (then the split does not apply)."""
        resume = self.known.ends[self.n_known - 1]
        ends, close = json_scan.element_ends(raw, resume, after_first=True)
        if any(key == "messages" for key, _, _ in json_scan.members(raw, close + 1, after_first=True)):
            return None
        return Layout(self.known.head, self.known, self.n_known, resume, ends)


def split(raw: bytes, known: KnownRequest | None) -> Split | None:
    """``raw`` with the leading messages it shares with ``known`` cut out, or None if it shares none."""
    if known is None or not raw.startswith(known.head):
        return None
    at = len(known.head)
    n_pieces = 0
    for piece in known.pieces:  # a memcmp each: the bulk of the body is a few large image literals
        if not raw.startswith(piece, at):
            break
        at += len(piece)
        n_pieces += 1
    n_known = bisect_right(known.piece_ends, n_pieces)  # the messages all of whose pieces matched
    if n_known == 0:
        return None
    i = json_scan.skip_ws(raw, known.ends[n_known - 1])
    if i >= len(raw):
        return None
    if raw[i] == _COMMA:
        after = json_scan.skip_ws(raw, i + 1)
        if after >= len(raw) or raw[after] == _CLOSE:  # a trailing comma: invalid, let the decoder say so
            return None
        tail = raw[i + 1 :]
    elif raw[i] == _CLOSE:
        tail = raw[i:]
    else:
        return None
    return Split(known, n_known, known.head + tail)


def layout_of(raw: bytes) -> Layout | None:
    """The ``Layout`` of a body decoded in full, or None if its messages cannot be located (no
    ``messages`` array, or more than one ``messages`` key)."""
    i = json_scan.skip_ws(raw, 0)
    if i >= len(raw) or raw[i] != 0x7B:  # {
        return None
    i = json_scan.skip_ws(raw, i + 1)
    found: tuple[int, list[int]] | None = None
    first = True
    while raw[i] != 0x7D:  # }
        if not first:
            i = json_scan.skip_ws(raw, i + 1)  # past the comma
        first = False
        key, start = json_scan.member_key(raw, i)
        if key != "messages":
            i = json_scan.value_end(raw, start)
        elif found is not None or raw[start] != 0x5B:  # a second messages key, or not an array
            return None
        else:
            ends, close = json_scan.element_ends(raw, start + 1, after_first=False)
            found = (start + 1, ends)
            i = close + 1
        i = json_scan.skip_ws(raw, i)
    if found is None:
        return None
    open_at, ends = found
    return Layout(raw[:open_at], None, 0, open_at, ends)


def _cut(raw: bytes, start: int, end: int, images: list[ImagePart], out: list[bytes]) -> None:
    """Append ``raw[start:end]`` to ``out``, cut around the literals of ``images``, which are shared rather
    than copied. An image whose literal is not in the body verbatim (its escapes were canonicalized)
    stays in the glue: any cut is correct, sharing only saves memory."""
    for image in images:
        literal = image.json
        at = raw.find(literal[:_FIND_PREFIX], start, end)
        if at < 0 or not raw.startswith(literal, at):
            continue
        if at > start:
            out.append(raw[start:at])
        out.append(literal)
        start = at + len(literal)
    if end > start:
        out.append(raw[start:end])
