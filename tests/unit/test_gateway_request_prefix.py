"""Reading a request past the messages it shares with the session's previous one gives exactly what a
full read gives: the same messages, fields and refusals (pure; no tokenizer)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from cua_stream.gateway import json_scan, request_prefix
from cua_stream.gateway.chat_request import ChatCall, parse_chat_request
from cua_stream.gateway.refusal import Refusal
from cua_stream.gateway.session import Session, SessionSpec

Serializer = Callable[[dict[str, Any]], bytes]

SERIALIZERS: dict[str, Serializer] = {
    "msgspec": msgspec.json.encode,
    "httpx": lambda b: json.dumps(b, ensure_ascii=False, separators=(",", ":")).encode(),
    "spaced": lambda b: json.dumps(b).encode(),  # ", " and ": ", \\u escapes for non-ASCII
    "indented": lambda b: json.dumps(b, indent=2).encode(),
    "escaped slashes": lambda b: msgspec.json.encode(b).replace(b"/", b"\\/"),
}


def image(i: int) -> str:
    return f"data:image/png;base64,{'QUJD' * (50 + i)}{i:04d}+/=="


def user(text: str, *images: int, detail: bool = True) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for i in images:
        url: dict[str, Any] = {"url": image(i), "detail": "auto"} if detail else {"url": image(i)}
        content.append({"type": "image_url", "image_url": url})
    return {"role": "user", "content": content}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def body(messages: list[dict[str, Any]], *, order: str = "middle", **extra: Any) -> dict[str, Any]:
    fields = {"model": "policy", "temperature": 0.8, "cua_call_kind": "agent_turn", **extra}
    if order == "first":
        return {"messages": messages, **fields}
    if order == "last":
        return {**fields, "messages": messages}
    return {"model": "policy", "messages": messages, **{k: v for k, v in fields.items() if k != "model"}}


def new_session(known: request_prefix.KnownRequest | None = None) -> Session:
    spec = SessionSpec(run_id="r", group_id="g", episode_id="e", sampling={"temperature": 0.8})
    session = Session.create(spec, 0.0)
    session.known_request = known
    return session


def outcome(raw: bytes, known: request_prefix.KnownRequest | None) -> ChatCall | tuple[int, str, str]:
    try:
        return parse_chat_request(raw, new_session(known))
    except Refusal as r:
        return (r.status, r.message, r.code)


def same(a: ChatCall | tuple[int, str, str], b: ChatCall | tuple[int, str, str]) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    fields = ("messages", "kind", "kind_given", "sampling", "stream", "model")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def assert_like_a_full_read(raw: bytes, known: request_prefix.KnownRequest | None) -> Any:
    fast, full = outcome(raw, known), outcome(raw, None)
    assert same(fast, full), (fast, full)
    return fast


# -- the whole conversation, turn after turn ---------------------------------------------------------


@pytest.mark.parametrize("style", SERIALIZERS)
@pytest.mark.parametrize("order", ["first", "middle", "last"])
def test_each_turn_reads_like_a_full_read_and_reuses_the_history(style: str, order: str) -> None:
    encode = SERIALIZERS[style]
    messages = [user('Task: "open" the {settings} [now]\\ café ☕', 0)]
    known = None
    previous: tuple[Any, ...] = ()
    for turn in range(1, 7):
        raw = encode(body(messages, order=order))
        call = assert_like_a_full_read(raw, known)
        assert isinstance(call, ChatCall) and call.known is not None
        if turn > 1:  # the history is the previous call's very objects: nothing re-parsed
            assert all(a is b for a, b in zip(call.messages, previous, strict=False))
            assert request_prefix.split(raw, known) is not None
        known, previous = call.known, call.messages
        messages += [assistant(f'{{"action": "click", "x": {turn}}}'), user("", turn)]


def test_a_retry_and_a_rewritten_history_read_like_a_full_read() -> None:
    messages = [user("task", 0), assistant("a"), user("", 1), assistant("b"), user("", 2)]
    call = outcome(msgspec.json.encode(body(messages)), None)
    assert isinstance(call, ChatCall)
    retry = msgspec.json.encode(body(messages))
    assert request_prefix.split(retry, call.known) is not None
    assert_like_a_full_read(retry, call.known)
    stripped = [*messages[:2], user("[screenshot removed]"), *messages[3:], assistant("c"), user("", 3)]
    raw = msgspec.json.encode(body(stripped))
    cut = request_prefix.split(raw, call.known)
    assert cut is not None and cut.n_known == 2  # up to the rewritten message
    assert_like_a_full_read(raw, call.known)
    other_task = msgspec.json.encode(body([user("another task", 0)]))
    assert request_prefix.split(other_task, call.known) is None
    assert_like_a_full_read(other_task, call.known)


def test_random_conversations_read_like_a_full_read() -> None:
    rng = random.Random(3)
    texts = ["", "x", '"', "\\", "]", "},{", "\\u00e9", "é", "😀", "\n\t", '{"messages": []}']
    for _ in range(150):
        encode = SERIALIZERS[rng.choice(list(SERIALIZERS))]
        messages: list[dict[str, Any]] = [user(rng.choice(texts), *range(rng.randrange(3)))]
        known = None
        for _ in range(rng.randrange(1, 5)):
            raw = encode(body(messages, order=rng.choice(["first", "middle", "last"])))
            call = assert_like_a_full_read(raw, known)
            if isinstance(call, ChatCall):
                known = call.known
            step = rng.random()
            if step < 0.7:
                reply: dict[str, Any] = assistant(rng.choice(texts))
                if rng.random() < 0.2:
                    reply = {"role": "assistant", "content": None}
                messages += [reply, user(rng.choice(texts), rng.randrange(9), detail=rng.random() < 0.5)]
            elif step < 0.85:
                messages[rng.randrange(len(messages))] = user("rewritten")
            else:
                messages = messages[: rng.randrange(1, len(messages) + 1)]


# -- bodies that extend the previous request but must be refused (or read) exactly as before -------


def known_of(messages: list[dict[str, Any]]) -> request_prefix.KnownRequest:
    call = outcome(msgspec.json.encode(body(messages)), None)
    assert isinstance(call, ChatCall) and call.known is not None
    return call.known


HISTORY = [user("task", 0), assistant("click"), user("", 1)]
HEAD = b'{"model":"policy","messages":['
HISTORY_JSON = b",".join(msgspec.json.encode(m) for m in HISTORY)


@pytest.mark.parametrize(
    "tail",
    [
        b'],"temperature":0.8}',  # the same messages (a retry)
        b',{"role":"assistant","content":"x"}],"temperature":0.8}',
        b' ,\n {"role":"assistant","content":"x"} ] , "temperature" : 0.8 }',
        b',],"temperature":0.8}',  # trailing comma
        b",",
        b"",
        b',{"role":"assistant","content":"x"}]',  # truncated
        b',{"role":"tool","content":"x"}],"temperature":0.8}',  # refused, naming messages[3]
        b',{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}',
        b',{"role":"user","content":[{"type":"audio"}]}],"temperature":0.8}',
        b',{"role":"assistant","content":"x"}],"temperature":0.5}',  # wrong temperature
        b',{"role":"assistant","content":"x"}],"input_ids":[1,2]}',
        b',{"role":"assistant","content":"x"}],"messages":[{"role":"user","content":"y"}]}',
        b',{"role":"assistant","content":"x"}],"messages":null}',
        b',{"role":"assistant","content":7}],"temperature":0.8}',  # not a content
        b',{"role":"assistant","content":"x"}],"temperature":0.8} trailing',
        b',{"role":"assistant","content":"x"}],"n":2}',
        b',{"role":"assistant","content":"x"}],"max_tokens":0}',
        b',{"role":"assistant","content":"x"}],"stream":true,"cua_call_kind":"final_answer","top_p":0.5}',
        b',{"role":"assistant","content":"x"}],"cua_call_kind":"nope"}',
    ],
)
def test_extensions_of_the_previous_request_read_like_a_full_read(tail: bytes) -> None:
    known = known_of(HISTORY)
    assert_like_a_full_read(HEAD + HISTORY_JSON + tail, known)


def test_a_changed_head_or_first_message_is_read_in_full() -> None:
    known = known_of(HISTORY)
    moved = b'{"model":"other","messages":[' + HISTORY_JSON + b'],"temperature":0.8}'
    assert request_prefix.split(moved, known) is None
    assert_like_a_full_read(moved, known)


def test_image_literals_are_shared_not_copied() -> None:
    call = outcome(msgspec.json.encode(body(HISTORY)), None)
    assert isinstance(call, ChatCall) and call.known is not None
    literals = [p.json for m in call.messages for p in m.images()]
    assert len(literals) == 2
    assert all(any(piece is literal for piece in call.known.pieces) for literal in literals)
    assert b"".join(call.known.pieces) == HISTORY_JSON


# -- the scanner -------------------------------------------------------------------------------------


def test_the_scanner_finds_every_value_of_valid_json() -> None:
    rng = random.Random(5)

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.4:
            return rng.choice([0, -1.5e3, True, False, None, "", "a\\b", '"]', "x" * 300, "é😀"])
        if roll < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(["k", "messages", "é", '"']): value(depth + 1) for _ in range(rng.randrange(4))}

    for _ in range(500):
        items = [value(0) for _ in range(rng.randrange(4))]
        for text in (json.dumps(items), json.dumps(items, indent=1, ensure_ascii=False)):
            raw = text.encode()
            ends, close = json_scan.element_ends(raw, raw.index(b"[") + 1, after_first=False)
            assert raw[close] == ord("]") and json_scan.skip_ws(raw, close + 1) == len(raw)
            starts = [raw.index(b"[") + 1, *ends][: len(ends)]
            decoded = [json.loads(raw[s:e].lstrip(b" \t\r\n,")) for s, e in zip(starts, ends, strict=True)]
            assert decoded == items
            obj = {f"k{i}": v for i, v in enumerate(items)}
            raw = json.dumps(obj).encode()
            found = json_scan.members(raw, 1, after_first=False)
            assert {k: json.loads(raw[s:e]) for k, s, e in found} == obj


def test_escaped_keys_are_read_as_keys() -> None:
    raw = b'{"mess\\u0061ges":[1],"x":2}'
    assert [k for k, _, _ in json_scan.members(raw, 1, after_first=False)] == ["messages", "x"]
