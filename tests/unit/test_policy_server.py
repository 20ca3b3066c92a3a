"""`cua-stream policies` under requests that are not chat completions: each is a 400 in the gateway's JSON
error shape saying why (before: plain-text 500s), images follow the project's one image rule (strict
base64, the pixel limit read from the header: a 9.9 KB 9000x9000 PNG is refused before it is decoded),
a screenshot is decoded off the event loop, so /health answers meanwhile, and only so many at once (with
a bounded queue; beyond, 503 and Retry-After), so memory is bounded too."""

from __future__ import annotations

import base64
import io
import json
import threading
import zlib

import anyio
import httpx
import numpy as np
import pytest
from PIL import Image

from cua_stream.tasks.policy_server import DecodeGate, create_app
from tests.conftest import wait_until

pytestmark = pytest.mark.anyio
URL = "/policies/oracle/click-test/3/v1/chat/completions"


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app()), base_url="http://policies")


def png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def bomb(width: int = 9000, height: int = 9000) -> bytes:
    """A valid PNG header claiming ``width``x``height`` 1-bit pixels over a few KB of zeros."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([1, 0, 0, 0, 0])
    rows = zlib.compress(b"\x00" * ((width + 7) // 8 + 1) * height, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def with_image(data_url: str) -> dict:
    part = {"type": "image_url", "image_url": {"url": data_url}}
    return {"model": "m", "messages": [{"role": "user", "content": [part]}]}


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, not list"),
        (b'{"messages": "hello"}', "messages must be a list of message objects"),
        (b'{"messages": [1]}', "messages must be a list of message objects"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
async def test_a_body_that_is_not_a_chat_request_is_a_json_400(raw: bytes, says: str) -> None:
    async with client() as http:
        r = await http.post(URL, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and says in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("data:image/png;base64,iVBORw0KGgo=!!", "not strict base64"),
        ("data:image/png;base64," + base64.encodebytes(png(4, 4)).decode(), "not strict base64"),  # wrapped
        (data_url(png(64, 64)[:60]), "cannot decode the image"),  # truncated
        (data_url(b"GIF89a not really"), "cannot decode the image"),
        (data_url(bomb()), "over the limit"),
    ],
)
async def test_an_image_that_breaks_the_image_rule_is_a_json_400(url: str, says: str) -> None:
    async with client() as http:
        r = await http.post(URL, json=with_image(url))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("image_url: ") and says in r.json()["error"]["message"]


async def test_a_good_request_still_gets_the_oracles_reply() -> None:
    async with client() as http:
        r = await http.post(URL, json=with_image(data_url(png(320, 200))))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"


@pytest.mark.parametrize(
    ("policy", "kind"), [("nothing", "done"), ("idle", "mouse_move"), ("random", "click")]
)
async def test_a_task_name_with_a_slash_is_played(policy: str, kind: str) -> None:
    """MiniWoB++ task names hold a '/' (miniwob/click-test): the route takes the seed as the last segment
    (before, the path's {task} segment took no '/', and every MiniWoB++ episode got a 404)."""
    async with client() as http:
        r = await http.post(f"/policies/{policy}/miniwob/click-test/1099511627776/v1/chat/completions",
                            json={"messages": []})  # fmt: skip
    assert r.status_code == 200, r.text
    reply = json.loads(r.json()["choices"][0]["message"]["content"])
    assert reply["action"]["type"] == kind


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/policies/idle/miniwob/no-such-task/3", "unknown policy 'idle' or task 'miniwob/no-such-task'"),
        ("/policies/idle/miniwob/stock-market/3", "task 'miniwob/stock-market'"),  # left out of the suite
        ("/policies/oracle/miniwob/choose-date/3", "or oracle does not play it"),  # no solver for it
        ("/policies/idle/miniwob/click-test/x", "is not <task>/<seed>"),
        ("/policies/teacher/click-box/3", "unknown policy 'teacher'"),
    ],
)
async def test_a_path_naming_no_policy_task_or_seed_is_a_json_404(path: str, says: str) -> None:
    async with client() as http:
        r = await http.post(f"{path}/v1/chat/completions", json={"messages": []})
    assert r.status_code == 404 and says in r.json()["error"]["message"], r.text


async def test_health_answers_while_a_screenshot_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    # The decode is held open until /health has answered (10 s at most), so the order does not depend on
    # how fast this machine decodes; decoded on the event loop, it would block /health for those 10 s.
    from cua_stream.tasks import policy_server

    decoding, answered = threading.Event(), threading.Event()
    real = policy_server.decode_screenshot

    def held_decode(url: str) -> np.ndarray:
        decoding.set()
        answered.wait(10)
        return real(url)

    monkeypatch.setattr(policy_server, "decode_screenshot", held_decode)
    order: list[str] = []
    async with client() as http:

        async def decode() -> None:
            r = await http.post(URL, json=with_image(data_url(png(640, 400))))
            order.append(f"chat {r.status_code}")

        async def health() -> None:
            assert await anyio.to_thread.run_sync(decoding.wait, 10)  # the chat request is being decoded
            r = await http.get("/health")
            order.append(f"health {r.status_code}")
            answered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(decode)
            tg.start_soon(health)
    assert order == ["health 200", "chat 200"]  # before: /health waited for the decode to finish


async def test_decodes_run_so_many_at_once_a_few_wait_and_more_are_refused_with_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each decode is held open until released, so which requests decode, wait or are refused does not
    # depend on how fast this machine decodes. Before: every request decoded at once (four images just
    # under the pixel limit took 1.43 GB), none waited and none was refused.
    from cua_stream.tasks import policy_server

    lock, release = threading.Lock(), threading.Event()
    running, most = [0], [0]
    real = policy_server.decode_screenshot

    def held_decode(url: str) -> np.ndarray:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            release.wait(30)
            return real(url)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(policy_server, "decode_screenshot", held_decode)
    app = create_app(DecodeGate(at_once=2, waiting=1))
    transport = httpx.ASGITransport(app=app)
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://policies") as http:

        async def chat() -> None:
            statuses.append((await http.post(URL, json=with_image(data_url(png(64, 40))))).status_code)

        async def decoding_two_and_one_waiting() -> bool:
            with lock:
                return running[0] == 2 and app.state.decodes.admitted == 3

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(chat)
                await wait_until(decoding_two_and_one_waiting, poll_s=0.01)
                refused = await http.post(URL, json=with_image(data_url(png(64, 40))))
                assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
                assert refused.json()["error"]["code"] == "busy"
                assert (await http.get("/health")).status_code == 200  # answers meanwhile
                release.set()
    assert statuses == [200, 200, 200] and most[0] == 2  # the third waited for a slot
