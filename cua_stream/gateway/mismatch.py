"""The TITO mismatch metric: the accumulated ids of a call versus the template's re-render, typed.

Both sequences are cut at special tokens. If the special tokens differ in number or in identity the
*structure* differs (``special_token_count`` / ``special_token_type``: a bug). Otherwise the text
segments between them are compared pairwise; a differing segment inside an assistant turn is
``assistant_text`` (expected and benign: sampled tokens are kept verbatim even when the canonical
tokenization of their text differs), anywhere else ``non_assistant_text`` (a bug in the TITO
bookkeeping or the template).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cua_stream.gateway.calltree import CallNode
    from cua_stream.gateway.rendering import Renderer


class MismatchType(enum.StrEnum):
    SPECIAL_TOKEN_COUNT = "special_token_count"
    SPECIAL_TOKEN_TYPE = "special_token_type"
    NON_ASSISTANT_TEXT = "non_assistant_text"
    ASSISTANT_TEXT = "assistant_text"


STRICT = frozenset(
    {MismatchType.SPECIAL_TOKEN_COUNT, MismatchType.SPECIAL_TOKEN_TYPE, MismatchType.NON_ASSISTANT_TEXT}
)
"""Types that indicate a bug; ``assistant_text`` alone is expected."""


def _split(ids: Sequence[int], special: frozenset[int]) -> tuple[list[int], list[list[int]]]:
    """Special tokens in order, and the text segments around them (len(segments) == len(specials) + 1)."""
    specials: list[int] = []
    segments: list[list[int]] = [[]]
    for tok in ids:
        if tok in special:
            specials.append(tok)
            segments.append([])
        else:
            segments[-1].append(tok)
    return specials, segments


def compare(
    accumulated: Sequence[int],
    rendered: Sequence[int],
    *,
    special_ids: frozenset[int],
    im_start_id: int,
    assistant_header: Sequence[int],
    decode: Callable[[Sequence[int]], str] | None = None,
) -> set[MismatchType]:
    """Mismatch types between ``accumulated`` (TITO) and ``rendered`` (template) ids; empty if equal.

    ``assistant_header`` is the tokenization of ``"assistant\\n"``: a segment right after
    ``<|im_start|>`` that starts with it (in either sequence) belongs to an assistant turn.
    """
    if list(accumulated) == list(rendered):
        return set()
    spec_a, seg_a = _split(accumulated, special_ids)
    spec_r, seg_r = _split(rendered, special_ids)
    if len(spec_a) != len(spec_r):
        return {MismatchType.SPECIAL_TOKEN_COUNT}
    if spec_a != spec_r:
        return {MismatchType.SPECIAL_TOKEN_TYPE}
    header = list(assistant_header)
    found: set[MismatchType] = set()
    for i, (a, r) in enumerate(zip(seg_a, seg_r, strict=True)):
        if a == r:
            continue
        opens_turn = i > 0 and spec_a[i - 1] == im_start_id
        in_assistant = opens_turn and (
            a[: len(header)] == header
            or r[: len(header)] == header
            or (decode is not None and decode(a).startswith("assistant\n"))
        )
        found.add(MismatchType.ASSISTANT_TEXT if in_assistant else MismatchType.NON_ASSISTANT_TEXT)
    return found


def tree_report(renderer: Renderer, leaves: Iterable[CallNode]) -> dict[str, Any]:
    """Each leaf's accumulated ids, closed the way the next turn would close them, against the
    template's re-render of its whole conversation (prompt messages and reply)."""
    header = renderer.encode("assistant\n")
    im_start = int(renderer.tokenizer.convert_tokens_to_ids("<|im_start|>"))
    by_leaf: dict[str, list[str]] = {}
    for leaf in leaves:
        accumulated = leaf.full_ids()
        accumulated.extend(renderer.encode(renderer.glue_after(leaf.completion_ids)))
        rendered = renderer.render_full(leaf.path(), add_generation_prompt=False)
        found = compare(
            accumulated,
            rendered,
            special_ids=renderer.special_ids,
            im_start_id=im_start,
            assistant_header=header,
            decode=renderer.tokenizer.decode,
        )
        by_leaf[leaf.call_id] = sorted(t.value for t in found)
    strict = sum(1 for types in by_leaf.values() if STRICT.intersection(types))
    return {"checked": len(by_leaf), "strict_mismatches": strict, "leaves": by_leaf}
