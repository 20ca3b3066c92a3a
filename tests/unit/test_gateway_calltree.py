"""Parent matching, siblings on retry, branches, and message canonicalisation (pure; no tokenizer)."""

from __future__ import annotations

import pytest

from cua_stream.events import CallKind, TokenIds
from cua_stream.gateway.calltree import CallTree, Match
from cua_stream.gateway.messages import ImagePart, Message, assistant_reply, parse_messages
from cua_stream.gateway.refusal import Refusal

IMG_A = "data:image/webp;base64," + "A" * 400
IMG_B = "data:image/webp;base64," + "A" * 399 + "B"  # same length, differs only at the end
IMG_C = "data:image/webp;base64," + "B" + "A" * 399  # same length and tail, differs at the start


def user(text: str, *images: str) -> Message:
    return Message("user", (text, *(ImagePart.from_url(u) for u in images)))


def record(tree: CallTree, messages: list[Message], reply: str, *, finish: str = "stop") -> str:
    match = tree.match(messages)
    call_id = f"c{len(tree)}"
    tree.add(
        call_id=call_id,
        match=match,
        messages=messages,
        seq=len(tree),
        kind=CallKind.AGENT_TURN,
        reply=assistant_reply(reply),
        prompt_ids=TokenIds([1, 2]),
        delta_start=0,
        completion_ids=TokenIds([3]),
        finish_reason=finish,
    )
    return call_id


def parent_of(tree: CallTree, messages: list[Message]) -> Match:
    return tree.match(messages)


def test_next_turn_extends_the_previous_call() -> None:
    tree = CallTree()
    m1 = [user("task", IMG_A)]
    first = record(tree, m1, "click")
    m2 = [*m1, assistant_reply("click"), user("", IMG_B)]
    match = parent_of(tree, m2)
    assert match.parent is not None and match.parent.call_id == first
    assert match.start == 2
    second = record(tree, m2, "type")
    m3 = [*m2, assistant_reply("type"), user("", IMG_C)]
    match = parent_of(tree, m3)
    assert match.parent is not None and match.parent.call_id == second and match.start == 4


def test_identical_retry_is_a_sibling_not_a_continuation() -> None:
    tree = CallTree()
    m1 = [user("task", IMG_A)]
    root = record(tree, m1, "click")
    m2 = [*m1, assistant_reply("click"), user("", IMG_B)]
    first_try = record(tree, m2, "a")
    retry = parent_of(tree, m2)
    assert retry.parent is not None and retry.parent.call_id == root
    second_try = record(tree, m2, "b")
    assert tree.nodes[first_try].parent is tree.nodes[second_try].parent
    assert [c.call_id for c in tree.nodes[root].children] == [first_try, second_try]
    # a root retried is another root
    assert parent_of(tree, m1).parent is None


def test_the_deepest_matching_call_wins_and_a_later_sibling_is_reachable() -> None:
    tree = CallTree()
    m1 = [user("task", IMG_A)]
    record(tree, m1, "click")
    m2 = [*m1, assistant_reply("click"), user("", IMG_B)]
    record(tree, m2, "a")
    second_try = record(tree, m2, "b")
    m3 = [*m2, assistant_reply("b"), user("", IMG_C)]
    match = parent_of(tree, m3)
    assert match.parent is not None and match.parent.call_id == second_try


@pytest.mark.parametrize("changed", [IMG_B, IMG_C])
def test_images_are_compared_in_full_even_when_the_cheap_key_collides(changed: str) -> None:
    tree = CallTree()
    m1 = [user("task", IMG_A)]
    record(tree, m1, "click")
    rewritten = [user("task", changed), assistant_reply("click"), user("", IMG_B)]
    assert parent_of(tree, rewritten).parent is None


def test_history_rewritten_in_place_branches_or_starts_a_new_root() -> None:
    tree = CallTree()
    m1 = [user("task", IMG_A)]
    root = record(tree, m1, "click")
    m2 = [*m1, assistant_reply("click"), user("", IMG_B)]
    record(tree, m2, "type")
    # computer-1 strips the old screenshot from the first message: nothing matches, a new root
    stripped = [user("task"), assistant_reply("click"), user(""), assistant_reply("type"), user("", IMG_C)]
    assert parent_of(tree, stripped).parent is None
    # the final-answer fallback substitutes the second reply: a branch under the root
    substituted = [*m2, assistant_reply("(no text response)"), user("final answer?")]
    match = parent_of(tree, substituted)
    assert match.parent is not None and match.parent.call_id == root and match.start == 2


def test_a_request_must_add_a_message_after_the_matched_reply() -> None:
    tree = CallTree()
    m1 = [user("task")]
    record(tree, m1, "click")
    assert parent_of(tree, [*m1, assistant_reply("click")]).parent is None


def test_leaves_and_paths() -> None:
    tree = CallTree()
    m1 = [user("task", IMG_A)]
    record(tree, m1, "click")
    m2 = [*m1, assistant_reply("click"), user("", IMG_B)]
    leaf = record(tree, m2, "type")
    assert [n.call_id for n in tree.leaves()] == [leaf]
    assert tree.nodes[leaf].path() == [*m2, assistant_reply("type")]
    assert [n.call_id for n in tree.nodes[leaf].lineage()] == ["c0", leaf]


def test_canonical_messages_merge_text_parts_and_ignore_extra_fields() -> None:
    a = parse_messages([{"role": "user", "content": "ab"}])
    b = parse_messages(
        [
            {
                "role": "user",
                "name": "x",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ]
    )
    assert a == b
    c = parse_messages([{"role": "assistant", "content": None, "tool_calls": None}])
    assert c == (assistant_reply(""),)
    with_image = parse_messages(
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMG_A, "detail": "auto"}}]}]
    )
    assert with_image[0].images()[0].url == IMG_A


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ([], "non-empty list"),
        ([{"role": "tool", "content": "x"}], "role"),
        ([{"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]}], "tool calls"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
            "data:",
        ),
        ([{"role": "user", "content": [{"type": "audio", "audio": "x"}]}], "not supported"),
        ([{"role": "user", "content": 3}], "content"),
    ],
)
def test_unrenderable_messages_are_refused_with_400(messages: list[object], needle: str) -> None:
    with pytest.raises(Refusal) as info:
        parse_messages(messages)
    assert info.value.status == 400 and needle in info.value.message
