"""The /generate body built from pre-encoded ids and images is byte for byte the one built from values."""

from __future__ import annotations

import random

import msgspec
import pytest

from cua_stream.events import TokenIds
from cua_stream.gateway.engine_client import JsonIds, JsonStrings, generate_body


def chunked(ids: list[int], rng: random.Random) -> JsonIds:
    """``ids`` as a lineage would build them: several fragments, some runs empty, some arrays."""
    out: JsonIds | None = None
    i = 0
    while i < len(ids) or out is None:
        n = rng.randrange(0, 6)
        run = ids[i : i + n]
        out = JsonIds.of(TokenIds(run) if rng.random() < 0.5 else run, out)
        i += n
    return out


@pytest.mark.parametrize("routing", [{}, {"routing_key": "s1", "rid": "c1"}])
def test_json_ids_and_images_give_the_same_bytes(routing: dict[str, str]) -> None:
    rng = random.Random(1)
    for _ in range(200):
        ids = [rng.randrange(151_700) for _ in range(rng.randrange(0, 40))]
        urls = [f"data:image/png;base64,{'A' * rng.randrange(1, 9)}/+=" for _ in range(rng.randrange(0, 3))]
        sampling = {"temperature": 0.8, "max_new_tokens": 64, "stop": ["\u00e9"]}
        expected = generate_body(ids, urls, sampling, **routing)
        json_ids = chunked(ids, rng)
        assert len(json_ids) == len(ids) and json_ids.decode() == ids
        assert generate_body(json_ids, JsonStrings.of(urls), sampling, **routing) == expected
        assert generate_body(json_ids, urls, sampling, **routing) == expected
        assert generate_body(ids, JsonStrings.of(urls), sampling, **routing) == expected
        assert msgspec.json.decode(expected)["input_ids"] == ids


def test_empty_runs_add_no_fragment() -> None:
    ids = JsonIds.of([], JsonIds.of([1, 2]))
    assert ids.fragments == (b"1,2",) and JsonIds.of([]).fragments == ()
