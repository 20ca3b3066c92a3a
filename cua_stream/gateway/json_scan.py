"""Where values begin and end in JSON text that a decoder has already accepted (pure).

msgspec gives the gateway values, not their positions; the request-prefix reuse (``request_prefix``)
needs the byte span of each message of a request body. These helpers walk the structure only: strings
are skipped with ``bytes.index`` (screenshots are ~100 KB strings), nothing is decoded or validated, so
they must only be given text a JSON decoder accepted.
"""

from __future__ import annotations

import re

import msgspec

_WHITESPACE = b" \t\r\n"
_QUOTE, _BACKSLASH = 0x22, 0x5C
_OPENERS = frozenset(b"[{")
_STRUCTURAL = re.compile(rb'["\[\]{}]')
_SCALAR_END = re.compile(rb"[,\]} \t\r\n]|$")


def skip_ws(buf: bytes, i: int) -> int:
    while i < len(buf) and buf[i] in _WHITESPACE:
        i += 1
    return i


def string_end(buf: bytes, i: int) -> int:
    """The index after the string whose opening quote is at ``i``."""
    j = i + 1
    while True:
        j = buf.index(b'"', j)
        k = j
        while buf[k - 1] == _BACKSLASH:
            k -= 1
        if (j - k) % 2 == 0:  # an even run of backslashes escapes itself, not the quote
            return j + 1
        j += 1


def value_end(buf: bytes, i: int) -> int:
    """The index after the value that starts at ``i``."""
    c = buf[i]
    if c == _QUOTE:
        return string_end(buf, i)
    if c not in _OPENERS:  # number, true, false, null
        match = _SCALAR_END.search(buf, i)
        assert match is not None  # the pattern matches at the end of the text
        return match.start()
    depth = 0
    search = _STRUCTURAL.search
    while True:
        match = search(buf, i)
        assert match is not None, "unbalanced JSON"
        j = match.start()
        c = buf[j]
        if c == _QUOTE:
            i = string_end(buf, j)
            continue
        i = j + 1
        depth += 1 if c in _OPENERS else -1
        if depth == 0:
            return i


def element_ends(buf: bytes, i: int, *, after_first: bool) -> tuple[list[int], int]:
    """The end index of each element of an array, from ``i`` (right after the ``[``, or right after an
    element when ``after_first``), and the index of the closing ``]``."""
    ends: list[int] = []
    i = skip_ws(buf, i)
    if not after_first and buf[i] != 0x5D:  # the first element has no comma before it
        i = value_end(buf, i)
        ends.append(i)
        i = skip_ws(buf, i)
    while buf[i] == 0x2C:  # ,
        i = value_end(buf, skip_ws(buf, i + 1))
        ends.append(i)
        i = skip_ws(buf, i)
    return ends, i


def member_key(buf: bytes, i: int) -> tuple[str, int]:
    """The key of the object member whose key string starts at ``i``, and the index of its value."""
    end = string_end(buf, i)
    literal = buf[i:end]
    key = literal[1:-1].decode() if b"\\" not in literal else msgspec.json.decode(literal)
    colon = skip_ws(buf, end)
    return key, skip_ws(buf, colon + 1)


def members(buf: bytes, i: int, *, after_first: bool) -> list[tuple[str, int, int]]:
    """(key, value start, value end) of each member of an object, from ``i`` (right after the ``{``, or
    right after a member's value when ``after_first``) to its closing ``}``."""
    out: list[tuple[str, int, int]] = []
    i = skip_ws(buf, i)
    first = not after_first
    while buf[i] != 0x7D:  # }
        if not first:
            i = skip_ws(buf, i + 1)  # past the comma
        first = False
        key, start = member_key(buf, i)
        i = value_end(buf, start)
        out.append((key, start, i))
        i = skip_ws(buf, i)
    return out
