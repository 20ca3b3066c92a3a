"""A chat request's body is read once per request, over HTTP (in-process ASGI, the real app, renderer
and chat path): one ``read_body``, one decode, one look for where its messages are; the session's next
request is decoded past the messages it shares with this one; a teacher gets the messages from that
same read (before, the service decoded the whole body again for the teacher)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import msgspec
import pytest

from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.memory import MemorySink
from cua_stream.events import VersionSpan
from cua_stream.gateway import chat_request, request_prefix
from cua_stream.gateway.app import create_app
from cua_stream.gateway.engine_client import EngineReply
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from tests.unit.gateway_support import (
    TEMPERATURE,
    Harness,
    ScriptedEngine,
    qwen_processor,
    renderer,
    reply_of,
    screenshot_url,
    user_turn,
)

__all__ = ["qwen_processor", "renderer"]  # fixtures

pytestmark = pytest.mark.anyio


class Reads:
    """Counts, installed over the chat path's readers of a body: ``read_body`` calls, the sizes of what
    each decoder was given, and the looks for where a body's messages are."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bodies = 0
        self.decoded: list[int] = []
        self.located = 0
        self.sizes: list[int] = []
        """The bodies' sizes, as a test sends them."""
        self.elsewhere: list[int] = []
        """Sizes of what ``msgspec.json.decode`` was given (anywhere: a reader outside the chat path)."""
        read_body, layout_of, split_layout = (
            chat_request.read_body,
            request_prefix.layout_of,
            request_prefix.Split.layout,
        )

        def counted_read(*args: Any, **kwargs: Any) -> Any:
            self.bodies += 1
            return read_body(*args, **kwargs)

        def counted_layout_of(raw: bytes) -> Any:
            self.located += 1
            return layout_of(raw)

        def counted_split_layout(split: request_prefix.Split, raw: bytes) -> Any:
            self.located += 1
            return split_layout(split, raw)

        monkeypatch.setattr(chat_request, "read_body", counted_read)
        plain = SimpleNamespace(decode=msgspec.json.decode)
        monkeypatch.setattr(msgspec.json, "decode", CountingDecoder(plain, self.elsewhere).decode)
        monkeypatch.setattr(request_prefix, "layout_of", counted_layout_of)
        monkeypatch.setattr(request_prefix.Split, "layout", counted_split_layout)
        for name in ("_decoder", "_plain_decoder"):
            monkeypatch.setattr(
                chat_request, name, CountingDecoder(getattr(chat_request, name), self.decoded)
            )


class CountingDecoder:
    def __init__(self, decoder: Any, sizes: list[int]) -> None:
        self.decoder, self.sizes = decoder, sizes

    def decode(self, raw: Any, **kwargs: Any) -> Any:
        self.sizes.append(len(raw) if isinstance(raw, bytes | bytearray | memoryview | str) else -1)
        return self.decoder.decode(raw, **kwargs)


async def test_each_request_body_is_read_once_and_the_next_past_what_it_shares(
    renderer: Renderer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(renderer, tmp_path)
    reads = Reads(monkeypatch)
    async with h.http:
        sid = await h.session()
        messages = [user_turn("first", screenshot_url(0))]
        sizes = []
        for turn in range(3):
            before = (reads.bodies, len(reads.decoded), reads.located)
            r = await h.chat(sid, messages)
            messages += [reply_of(r), user_turn(f"turn {turn}", screenshot_url(turn + 1))]
            assert (reads.bodies, len(reads.decoded), reads.located) == (
                before[0] + 1,
                before[1] + 1,
                before[2] + 1,
            )
            sizes.append(len(r.request.content))
    assert reads.bodies == 3 and len(reads.decoded) == 3
    assert reads.decoded[0] == sizes[0]  # the first body in full
    skipped = [s - d for d, s in zip(reads.decoded, sizes, strict=True)]
    assert 0 == skipped[0] < skipped[1] < skipped[2]  # then past its history, a longer one each time
    assert not set(sizes) & set(reads.elsewhere)  # and by nothing else
    assert len(h.turns()) == 3


class ScoringEngine(ScriptedEngine):
    """Scores a forced completion: its ids, each at the same logprob."""

    async def score(self, prompt: Any, images: Any, ids: Sequence[int], text: str, temperature: float,
                    *, routing_key: str | None = None, rid: str | None = None) -> EngineReply:  # fmt: skip
        return EngineReply(text=text, output_ids=list(ids), logprobs=[-0.5] * len(ids), finish_reason="stop",
                           abort_status=None, abort_message="", prompt_tokens=0, engine_ms=1.0, meta_info={},
                           weight_versions=(VersionSpan(version=self.version, start=0, end=len(ids)),))  # fmt: skip


class Teacher:
    def __init__(self) -> None:
        self.asked: list[Any] = []

    async def reply(self, name: str, messages: list[Any] | msgspec.Raw) -> str:
        self.asked.append(msgspec.json.decode(msgspec.json.encode(messages)))  # what HttpTeacher sends
        return "click the button"


async def test_a_teacher_gets_the_messages_from_the_one_read(
    renderer: Renderer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    teacher = Teacher()
    gateway = Gateway(renderer=renderer, engine=ScoringEngine(renderer), sink=MemorySink(),
                      blobs=LocalBlobStore(tmp_path / "blobs"), teacher=teacher)  # fmt: skip
    reads = Reads(monkeypatch)
    transport = httpx.ASGITransport(app=create_app(gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        spec = {"run_id": "run", "group_id": "g1", "episode_id": "ep1", "teacher": "oracle",
                "sampling": {"temperature": TEMPERATURE, "max_new_tokens": 64}}  # fmt: skip
        r = await http.post("/sessions", json=spec)
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        messages = [user_turn("first", screenshot_url(0))]
        for turn in range(2):
            body = {"model": "policy", "messages": messages, "temperature": TEMPERATURE}
            r = await http.post(f"/sessions/{sid}/v1/chat/completions", json=body)
            reads.sizes.append(len(r.request.content))
            assert r.status_code == 200, r.text
            assert teacher.asked[-1] == messages  # as the client sent them
            sent = messages
            messages = [*messages, reply_of(r), user_turn(f"turn {turn}", screenshot_url(turn + 1))]
        body = {"model": "policy", "messages": sent, "temperature": TEMPERATURE}
        r = await http.post(f"/sessions/{sid}/v1/chat/completions", json=body)  # a retry: every message known
        reads.sizes.append(len(r.request.content))
        assert r.status_code == 200, r.text
        assert teacher.asked[-1] == sent
    assert reads.bodies == 3 and len(reads.decoded) == 3 and reads.located == 3
    assert len(teacher.asked) == 3
    assert not set(reads.sizes) & set(reads.elsewhere)
