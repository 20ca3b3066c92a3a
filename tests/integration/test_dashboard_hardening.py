"""The dashboard is a server too: records written by anyone who reaches the broker, and pages opened by
anyone who reaches the port. Markup in record strings stays text in a real Chromium (under a
Content-Security-Policy), a malformed image hash is refused at decode, NaN and infinities travel as JSON
strings (before: 500s and a page stuck at "connecting…"), a token id of -1 is shown as such (before: a
500), a record the board cannot take is counted instead of stopping the reader, and live streams are
capped (before: ~20,500 of them exhausted the file descriptors). Every refusal for want of capacity is a
503 with Retry-After, said at once: 300 clients at the same instant get the 64 designed streams (before:
19, and 281 bare 503s from uvicorn's connection limit); a step rebuild beyond two at once is refused
(before: queued), and one whose client leaves is cancelled (before: 30 abandoned ones ran on)."""

from __future__ import annotations

import json
import logging
import math
import threading
from pathlib import Path
from urllib.parse import quote

import anyio
import httpx
import msgspec
import pytest
import uvicorn

from consumers.dashboard.board import Board
from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import build_app, served
from consumers.trainer.inspect.step import StepBatch, StepRules
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import (
    CallKind,
    ImageRef,
    Logprobs,
    OutcomeEvent,
    Reward,
    ScoreEvent,
    TaskRef,
    TokenIds,
    TrainStep,
    TurnEvent,
    WorkRequest,
)
from cua_stream.topics import OUTCOMES, SCORES, TRAIN_STEPS, TURNS, WORK
from tests.conftest import free_port, wait_until
from tests.integration.browser import chromium
from tests.integration.gateway_servers import serving, tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.anyio]

RUN, GROUP = "evil", "evil-g000000"
EVIL_ID = '<img src=x onerror="window.__pwned=1">'
EVIL_TASK = "<script>window.__pwned=2</script>"
EVIL_FINISH = '"><img src=x onerror="window.__pwned=3">'
EVIL_HASH = 'x" onerror="window.__pwned=4'


def strict(text: str) -> object:
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))


def records() -> list[tuple[object, object]]:
    ids = {"run_id": RUN, "group_id": GROUP, "episode_id": EVIL_ID}
    turn = TurnEvent(**ids, seq=0, call_id="c0", kind=CallKind.AGENT_TURN, prompt_ids=TokenIds([1, 2]),
                     completion_ids=TokenIds([-1, 42, 99_999_999]), completion_logprobs=Logprobs([-1.0] * 3),
                     policy_version=0, finish_reason=EVIL_FINISH, started_at=1.0, engine_ms=math.nan)  # fmt: skip
    bad_hash = msgspec.structs.replace(  # a writer that does not validate: the dashboard refuses it at decode
        turn, seq=1, call_id="c1", images=(ImageRef(sha256=EVIL_HASH, size=1, width=1, height=1),)
    )
    return [
        (
            WORK,
            WorkRequest(
                **ids,
                task=TaskRef(name=EVIL_TASK),
                sample_index=0,
                group_size=1,
                policy_version=0,
                created_at=0.0,
            ),
        ),
        (TURNS, turn),
        (TURNS, bad_hash),
        (
            OUTCOMES,
            OutcomeEvent(
                **ids,
                task=EVIL_TASK,
                policy_version=0,
                agent_started=True,
                rewards={"reward": math.nan},
                started_at=0.0,
                finished_at=math.inf,
            ),
        ),
        (SCORES, ScoreEvent(**ids, verdict=Reward(value=math.nan), policy_version=0, scored_at=2.0)),
        (
            TRAIN_STEPS,
            TrainStep(
                run_id=RUN,
                step=1,
                policy_version=1,
                n_groups=1,
                n_episodes=1,
                n_samples=1,
                loss=math.nan,
                group_ids=(GROUP,),
                finished_at=3.0,
                metrics={"mean_reward": -math.inf, "logprob_gap": math.inf, "grad_norm": math.nan},
            ),
        ),
    ]


async def publish(bus: BusConfig, items: list[tuple[object, object]]) -> None:
    async with EventProducer(bus) as producer:
        for spec, event in items:
            await producer.publish(spec, event)  # type: ignore[arg-type]


def server(cfg: DashboardConfig, app: object = None) -> uvicorn.Server:
    """As ``cua-stream dashboard`` serves it."""
    return uvicorn.Server(served(cfg, app or build_app(cfg)))  # type: ignore[arg-type]


async def ask(port: int, path: str) -> anyio.abc.SocketStream:
    """A client that has sent ``GET path`` on its own connection (and reads the answer, or leaves)."""
    sock = await anyio.connect_tcp("127.0.0.1", port)
    await sock.send(f"GET {path} HTTP/1.1\r\nHost: dashboard\r\n\r\n".encode())
    return sock


async def head(sock: anyio.abc.SocketStream, until: bytes = b"\r\n\r\n") -> tuple[int, dict[str, str], bytes]:
    """The status and headers of the answer on ``sock`` (read up to ``until``), and what was read."""
    data = b""
    while until not in data:
        data += await sock.receive()
    status_line, *lines = data.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, data


async def test_hostile_records_are_shown_as_text_and_non_finite_numbers_as_json_strings(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    await publish(bus_config, records())
    cfg = DashboardConfig(port=free_port(), blob_dir=str(tmp_path / "blobs"), model_path=str(tiny_model_dir),
                          bus=bus_config)  # fmt: skip
    url = f"http://127.0.0.1:{cfg.port}"
    with serving(server(cfg)):
        async with httpx.AsyncClient(timeout=30) as http:
            summary: dict = {}
            with anyio.fail_after(60):
                while summary.get("records", 0) < 5:  # the sixth (its hash markup) is undecodable
                    r = await http.get(f"{url}/api/summary")
                    assert r.status_code == 200, r.text  # before: a plain-text 500 once a NaN was in
                    summary = strict(r.text)  # type: ignore[assignment]
                    await anyio.sleep(0.2)
            (step,) = summary["steps"]
            assert (step["grad_norm"], step["logprob_gap"], step["mean_reward"]) == (
                "NaN",
                "Infinity",
                "-Infinity",
            )
            assert summary["verdicts"] == {"reward nan (ok)": 1}
            assert summary["dead_letters"] == {"undecodable (seen by the dashboard)": 1}  # the markup hash
            r = await http.get(f"{url}/api/episodes/{quote(EVIL_ID, safe='')}")
            assert r.status_code == 200, r.text  # before: the -1 made it a 500
            episode = strict(r.text)
            (call,) = episode["calls"]  # type: ignore[index]
            assert call["action"].startswith("⟨bad token id -1⟩") and call["action"].endswith(
                "⟨bad token id 99999999⟩"
            )
            assert call["engine_ms"] == "NaN" and episode["outcome"]["rewards"] == {"reward": "NaN"}  # type: ignore[index]
            async with http.stream("GET", f"{url}/api/stream") as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        assert strict(line[6:])["steps"][0]["grad_norm"] == "NaN"  # type: ignore[index]
                        break
            for path in ("/", "/app.js", "/api/summary"):
                headers = (await http.get(f"{url}{path}")).headers
                assert "script-src 'self'" in headers["content-security-policy"]
                assert headers["x-content-type-options"] == "nosniff"
        async with chromium(f"{url}/#episode={quote(EVIL_ID, safe='')}") as page:
            dom = await page.until(lambda h: "5 records" in h and "bad token id -1" in h)
            pwned = await page.call(
                "Runtime.evaluate", expression="String(window.__pwned)", returnByValue=True
            )
            assert pwned["result"]["value"] == "undefined"  # no script of a record ran
            assert (
                "&lt;img src=x onerror=" in dom and "&lt;script&gt;window.__pwned=2" in dom
            )  # shown as text
            assert "<td>NaN</td>" in dom  # the grad norm, as the record has it


async def test_live_streams_are_capped_and_end_by_themselves(
    bus_config: BusConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = DashboardConfig(port=free_port(), blob_dir=str(tmp_path), bus=bus_config, max_streams=3,
                          max_connections=40, stream_max_s=10)  # fmt: skip
    url = f"http://127.0.0.1:{cfg.port}"
    caplog.set_level(logging.WARNING, logger="consumers.dashboard.server")
    with serving(server(cfg)):
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=100)) as http:
            async with (
                http.stream("GET", f"{url}/api/stream") as a,
                http.stream("GET", f"{url}/api/stream") as b,
                http.stream("GET", f"{url}/api/stream") as c,
            ):
                assert {a.status_code, b.status_code, c.status_code} == {200}
                refused = [await http.get(f"{url}/api/stream") for _ in range(12)]
                assert {r.status_code for r in refused} == {503}
                assert (
                    refused[0].headers["retry-after"] == "5" and "max_streams" in refused[0].json()["detail"]
                )
                assert (await http.get(f"{url}/api/summary")).status_code == 200  # the rest still answers
                assert (await http.get(f"{url}/")).status_code == 200
            # the three are closed: once the server has seen them go, a new one is served, and it ends by
            # itself after stream_max_s (10 s: the three must outlast the fourteen requests above, however
            # slow the machine)
            with anyio.fail_after(60):
                served = False
                while not served:
                    async with http.stream("GET", f"{url}/api/stream") as d:
                        served = d.status_code == 200
                        async for _ in d.aiter_lines():
                            pass
                    await anyio.sleep(0.2)
    lines = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and "refused 1 live-stream" in lines[0].getMessage()  # a burst, logged once


async def test_simultaneous_clients_get_every_designed_stream_and_each_refusal_says_when_to_retry(
    bus_config: BusConfig, tmp_path: Path
) -> None:
    cfg = DashboardConfig(
        port=free_port(), blob_dir=str(tmp_path), bus=bus_config
    )  # 64 streams, 256 requests
    app = build_app(cfg, Board())
    with serving(server(cfg, app)):
        clients = []
        for _ in range(300):  # every client connected before any asks: 300 open connections at once
            clients.append(await anyio.connect_tcp("127.0.0.1", cfg.port))
        for sock in clients:
            await sock.send(b"GET /api/stream HTTP/1.1\r\nHost: dashboard\r\n\r\n")
        answers = []
        with anyio.fail_after(60):
            for sock in clients:
                status, headers, data = await head(sock)
                while status == 200 and b"\ndata: " not in data:  # a stream: read up to its first summary
                    data += await sock.receive()
                answers.append((status, headers))
        for sock in clients:
            await sock.aclose()
    refused = [h for status, h in answers if status != 200]
    assert len(answers) - len(refused) == cfg.max_streams  # before: 19
    assert {status for status, _ in answers} == {200, 503}
    assert all(h.get("retry-after") == "5" and h["content-type"] == "application/json" for h in refused)
    assert app.state.summary.builds == 1  # one summary for 64 streams (before: one per stream per push)


async def test_step_rebuilds_past_the_limit_are_refused_and_one_whose_client_leaves_is_cancelled(
    bus_config: BusConfig, tmp_path: Path
) -> None:
    """The rebuild is held open (by the test's reader) until released, so which requests are in progress
    when does not depend on how fast a real one reads its topics."""
    entered: list[str] = []
    cancelled: list[str] = []
    release = threading.Event()

    async def held_rebuild(bus: BusConfig, run: str, step: int, rules: StepRules) -> StepBatch:
        entered.append(run)
        try:
            await anyio.to_thread.run_sync(release.wait, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancelled.append(run)
            raise
        raise LookupError(f"run {run!r} has no step {step}")

    async def listed(run: str, among: list[str]) -> None:
        async def there() -> bool:
            return run in among

        await wait_until(there, poll_s=0.02)

    cfg = DashboardConfig(port=free_port(), blob_dir=str(tmp_path), bus=bus_config, max_streams=1,
                          max_connections=3)  # fmt: skip
    path = "/api/inspect/step?step=1&run="
    opened: list[anyio.abc.SocketStream] = []

    async def request(path: str) -> anyio.abc.SocketStream:
        opened.append(sock := await ask(cfg.port, path))
        return sock

    async def admitted(run: str) -> anyio.abc.SocketStream:
        """A rebuild of ``run`` asked until it is admitted (refusals are answered at once)."""
        while True:
            sock, refused = await request(path + run), False
            async with anyio.create_task_group() as tg:

                async def answered(sock: anyio.abc.SocketStream) -> None:
                    nonlocal refused
                    assert (await head(sock))[0] == 503
                    refused = True
                    tg.cancel_scope.cancel()

                async def rebuilding() -> None:
                    await listed(run, entered)
                    tg.cancel_scope.cancel()

                tg.start_soon(answered, sock)
                tg.start_soon(rebuilding)
            if not refused:
                return sock
            await sock.aclose()

    with serving(server(cfg, build_app(cfg, rebuild=held_rebuild))), anyio.fail_after(60):
        try:
            a = await admitted("a")
            b = await admitted("b")
            status, headers, _ = await head(await request(path + "c"))
            assert (status, headers["retry-after"]) == (503, "5")  # at once (before: queued behind a and b)
            stream = await request("/api/stream")
            assert (await head(stream))[0] == 200  # a, b and the stream: max_connections in progress
            status, headers, data = await head(await request("/api/summary"), until=b"}")
            assert (status, headers["retry-after"]) == (503, "5") and b"dashboard.max_connections" in data
            await (
                b.aclose()
            )  # b's client leaves: its rebuild is cancelled (before: it ran on, holding a slot)
            await listed("b", cancelled)
            await stream.aclose()
            d = await admitted("d")  # once the server has seen b and the stream go
            release.set()  # the held rebuilds end: a and d are answered
            assert (await head(a))[0] == 404 and (await head(d))[0] == 404
        finally:
            release.set()
            for sock in opened:
                await sock.aclose()
    assert entered == ["a", "b", "d"] and cancelled == ["b"]
