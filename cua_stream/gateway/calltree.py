"""An episode's call tree and the parent-matching rule (pure; no I/O).

Every recorded call is a node holding its exact prompt ids and the completion ids the engine sampled.
A node's *path* is the messages of its request followed by its reply (the assistant message as the
client will echo it back).

Parent matching: a request extends the recorded call with the **longest path that is a prefix of the
request's messages**, provided at least one message follows that prefix. Consequences:

- a normal next turn (history + reply + new observation) extends the previous call;
- a retried identical request does not contain the first attempt's reply, so it matches the first
  attempt's parent and is recorded as its **sibling**, never as a continuation;
- a history rewritten in place (computer-1 stripping old screenshots, a compaction reset, the
  final-answer fallback's substituted turns) matches a shallower call or none: a **branch**, or a
  **new root** — nothing is ever deleted or mutated.

Candidates are found through an index on (path length, rolling cheap key) and then compared message by
message, so a request costs one pass of cheap keys plus one full comparison of the matched prefix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cua_stream.events import CallKind, TokenIds
from cua_stream.gateway.messages import Message


@dataclass(eq=False)
class CallNode:
    call_id: str
    parent: CallNode | None
    seq: int
    kind: CallKind
    new_messages: tuple[Message, ...]
    """The request's messages after the parent's path (all of them for a root)."""
    reply: Message
    prompt_ids: TokenIds
    """The full prompt the engine saw: the parent's prompt + completion + this call's delta."""
    delta_start: int
    """Offset in ``prompt_ids`` where this call's own (delta) prompt ids begin."""
    completion_ids: TokenIds
    finish_reason: str
    path_len: int
    path_key: int
    image_json: tuple[bytes, ...] = ()
    """Every image of the prompt as a JSON string literal, in prompt order (for the engine request)."""
    ids_json: tuple[bytes, ...] = ()
    """The full ids (prompt + completion) as JSON, one fragment per call of the lineage (for the engine
    request; see ``engine_client.JsonIds``)."""
    children: list[CallNode] = field(default_factory=list)

    @property
    def cut_by_length(self) -> bool:
        return self.finish_reason == "length"

    def full_ids(self) -> TokenIds:
        ids = TokenIds(self.prompt_ids)
        ids.extend(self.completion_ids)
        return ids

    def delta_ids(self) -> TokenIds:
        return TokenIds(self.prompt_ids[self.delta_start :])

    def lineage(self) -> list[CallNode]:
        """Root first, ending with this node."""
        out: list[CallNode] = []
        node: CallNode | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def path(self) -> list[Message]:
        messages: list[Message] = []
        for node in self.lineage():
            messages.extend(node.new_messages)
            messages.append(node.reply)
        return messages


def rolling_keys(messages: Sequence[Message]) -> list[int]:
    """``keys[k]`` summarises ``messages[:k]`` (``keys[0] == 0``)."""
    keys = [0]
    for m in messages:
        keys.append(hash((keys[-1], m.cheap_key())))
    return keys


@dataclass(frozen=True)
class Match:
    parent: CallNode | None
    start: int
    """Index of the first request message after the parent's path (0 for a new root)."""
    keys: list[int]


class CallTree:
    def __init__(self) -> None:
        self.nodes: dict[str, CallNode] = {}
        self.roots: list[CallNode] = []
        self._index: dict[tuple[int, int], list[CallNode]] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[CallNode]:
        return iter(self.nodes.values())

    def match(self, messages: Sequence[Message]) -> Match:
        keys = rolling_keys(messages)
        for length in range(len(messages) - 1, 0, -1):
            if messages[length - 1].role != "assistant":
                continue
            for node in self._index.get((length, keys[length]), ()):
                if _path_equals(node, messages):
                    return Match(node, length, keys)
        return Match(None, 0, keys)

    def add(
        self,
        *,
        call_id: str,
        match: Match,
        messages: Sequence[Message],
        seq: int,
        kind: CallKind,
        reply: Message,
        prompt_ids: TokenIds,
        delta_start: int,
        completion_ids: TokenIds,
        finish_reason: str,
        image_json: tuple[bytes, ...] = (),
        ids_json: tuple[bytes, ...] = (),
    ) -> CallNode:
        path_len = len(messages) + 1
        node = CallNode(
            call_id=call_id,
            parent=match.parent,
            seq=seq,
            kind=kind,
            new_messages=tuple(messages[match.start :]),
            reply=reply,
            prompt_ids=prompt_ids,
            delta_start=delta_start,
            completion_ids=completion_ids,
            finish_reason=finish_reason,
            path_len=path_len,
            path_key=hash((match.keys[len(messages)], reply.cheap_key())),
            image_json=image_json,
            ids_json=ids_json,
        )
        self.nodes[call_id] = node
        if match.parent is None:
            self.roots.append(node)
        else:
            match.parent.children.append(node)
        self._index.setdefault((path_len, node.path_key), []).append(node)
        return node

    def leaves(self) -> list[CallNode]:
        return [n for n in self.nodes.values() if not n.children]


def _path_equals(node: CallNode, messages: Sequence[Message]) -> bool:
    """Whether ``messages`` starts with ``node``'s path, compared in full (walks from the node upwards)."""
    end = node.path_len
    current: CallNode | None = node
    while current is not None:
        if messages[end - 1] != current.reply:
            return False
        start = end - 1 - len(current.new_messages)
        if tuple(messages[start : end - 1]) != current.new_messages:
            return False
        end = start
        current = current.parent
    return end == 0
