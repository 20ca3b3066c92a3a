"""Shared pieces of the gateway unit tests: the real Qwen tokenizer and processor (built once per
session, offline), screenshots, and an in-memory scripted engine (unit tests only)."""

from __future__ import annotations

import base64
import functools
import io
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image, ImageDraw

from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.memory import MemorySink
from cua_stream.events import SummaryEvent, TurnEvent, VersionSpan
from cua_stream.gateway.app import create_app
from cua_stream.gateway.drain import DrainGate
from cua_stream.gateway.engine_client import EngineReply, JsonIds, JsonStrings
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from cua_stream.topics import SUMMARIES, TURNS, TopicSpec
from tests.conftest import wait_until

TEMPERATURE = 0.8


@functools.cache
def _qwen_processor() -> Any:
    from cua_stream.models.tiny import build_processor, build_tokenizer

    return build_processor(build_tokenizer())


@pytest.fixture(scope="session")
def qwen_processor() -> Any:
    # Imported into several test modules, each of which gets its own fixture definition: the cache makes
    # them share one build (5 s).
    return _qwen_processor()


@pytest.fixture(scope="session")
def renderer(qwen_processor: Any) -> Renderer:
    return Renderer(qwen_processor.tokenizer, qwen_processor.image_processor)


def screenshot_bytes(i: int, size: tuple[int, int] = (320, 180), fmt: str = "WEBP") -> bytes:
    """A distinct synthetic desktop frame: a coloured background and a 'window' that moves with ``i``."""
    img = Image.new("RGB", size, ((37 * i) % 256, (91 * i + 40) % 256, 200))
    draw = ImageDraw.Draw(img)
    x = (i * 23) % max(1, size[0] - 60)
    draw.rectangle([x, 20, x + 60, 60], fill=(250, 250, 250))
    draw.text((x + 4, 30), f"step {i}", fill=(0, 0, 0))
    buf = io.BytesIO()
    img.save(buf, fmt, quality=80) if fmt == "WEBP" else img.save(buf, fmt)
    return buf.getvalue()


def png_bomb(side: int = 20_000) -> bytes:
    """A 1-bit PNG of side x side white pixels: tiny compressed, 400 Mpx decoded."""
    import struct
    import zlib

    row = b"\x00" + b"\xff" * (side // 8)
    compressed = zlib.compress(row * side, 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", compressed) + chunk(b"IEND", b"")


def data_url(data: bytes, mime: str = "image/webp") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def screenshot_url(i: int, size: tuple[int, int] = (320, 180)) -> str:
    return data_url(screenshot_bytes(i, size))


def user_turn(text: str, image_url: str | None = None) -> dict[str, Any]:
    """A user message the way computer-1 sends it: text part, then the screenshot as an image_url part."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if image_url is not None:
        content.append({"type": "image_url", "image_url": {"url": image_url, "detail": "auto"}})
    return {"role": "user", "content": content}


@dataclass
class EngineCall:
    input_ids: list[int]
    image_data: list[str]
    sampling_params: dict[str, Any]
    routing_key: str | None
    rid: str | None


@dataclass
class ScriptedEngine:
    """An in-memory engine: answers each call with the next scripted (finish_reason, text) or raises the
    next scripted exception; the completion ids are the canonical tokenization of the text (plus
    ``<|im_end|>`` on stop). Records what it was sent."""

    renderer: Renderer
    script: deque[Any] = field(default_factory=deque)
    calls: list[EngineCall] = field(default_factory=list)
    version: int = 3

    healthy: bool = True

    async def health(self) -> tuple[bool, str]:
        return self.healthy, "ok" if self.healthy else "unreachable: ConnectError"

    def then(self, *items: Any) -> ScriptedEngine:
        self.script.extend(items)
        return self

    async def generate(
        self,
        input_ids: list[int] | JsonIds,
        image_data: Sequence[str] | JsonStrings,
        sampling_params: dict[str, Any],
        *,
        routing_key: str | None = None,
        rid: str | None = None,
    ) -> EngineReply:
        # the gateway hands over JSON literals; the URLs are what an engine would decode them to
        urls = image_data.decode() if isinstance(image_data, JsonStrings) else list(image_data)
        sent = input_ids.decode() if isinstance(input_ids, JsonIds) else list(input_ids)
        self.calls.append(EngineCall(sent, urls, dict(sampling_params), routing_key, rid))
        item = self.script.popleft() if self.script else ("stop", f"reply {len(self.calls)}")
        if isinstance(item, BaseException):
            raise item
        finish, text = item
        ids = self.renderer.encode(text)
        if finish == "stop":
            ids.append(self.renderer.im_end_id)
        return EngineReply(
            text=text,
            output_ids=ids,
            logprobs=[-0.25 - 0.01 * i for i in range(len(ids))],
            finish_reason=finish,
            abort_status=503 if finish == "abort" else None,
            abort_message="aborted for a weight update",
            weight_versions=(VersionSpan(version=self.version, start=0, end=len(ids)),),
            prompt_tokens=len(input_ids),
            engine_ms=1.0,
            meta_info={},
        )


def chain(events: Iterator[Any] | list[Any]) -> dict[str, list[int]]:
    """call_id → full ids (prompt + completion) rebuilt from events alone (parents before children)."""
    full: dict[str, list[int]] = {}
    for ev in sorted(events, key=lambda e: e.seq):
        prefix = full[ev.parent_call_id] if ev.parent_call_id else []
        full[ev.call_id] = [*prefix, *ev.prompt_ids, *ev.completion_ids]
    return full


class FlakySink(MemorySink):
    """Fails the next ``failures`` publishes (a broker outage), then behaves."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    async def publish(self, spec: TopicSpec, event: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker down")
        await super().publish(spec, event)


class Harness:
    def __init__(self, renderer: Renderer, tmp_path: Path, api_key: str | None = None) -> None:
        self.engine = ScriptedEngine(renderer)
        self.sink = FlakySink()
        self.blobs = LocalBlobStore(tmp_path / "blobs")
        self.gateway = Gateway(renderer=renderer, engine=self.engine, sink=self.sink, blobs=self.blobs)
        self.app = create_app(self.gateway, api_key=api_key)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://gw")

    async def session(self, **sampling: Any) -> str:
        body = {
            "run_id": "run",
            "group_id": "g1",
            "episode_id": "ep1",
            "sampling": {"temperature": TEMPERATURE, "max_new_tokens": 64, **sampling},
        }
        r = await self.http.post("/sessions", json=body)
        assert r.status_code == 201, r.text
        return r.json()["session_id"]

    async def chat(self, sid: str, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        body = {"model": "policy", "messages": messages, "temperature": TEMPERATURE, **extra}
        return await self.http.post(f"/sessions/{sid}/v1/chat/completions", json=body)

    def turns(self) -> list[TurnEvent]:
        return self.sink.of(TURNS)  # type: ignore[return-value]

    def summaries(self) -> list[SummaryEvent]:
        return self.sink.of(SUMMARIES)  # type: ignore[return-value]


@pytest.fixture
async def h(renderer: Renderer, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(renderer, tmp_path)
    async with harness.http:
        yield harness


async def at_the_gate(gate: DrainGate, *, held: int = 0, drains: int = 0) -> None:
    """Until ``held`` calls wait at ``gate`` for the resume and ``drains`` drains wait there for the calls
    in flight (the caller bounds the wait). Read off the gate's events: the gate counts neither itself."""

    async def there() -> bool:
        resumes, idles = gate._resumed.statistics().tasks_waiting, gate._idle.statistics().tasks_waiting
        return resumes >= held and idles >= drains

    await wait_until(there, poll_s=0.01)


def reply_of(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    return {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]}
