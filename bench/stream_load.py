"""The gateway's curve: turns/s against offered load (sessions in flight) up to its knee, through the real
gateway (its own process) against the simulated engine (``bench/fixtures/sim_engine.py``, its own
process: a cited latency model of a batched GPU server, a benchmark fixture), with episodes of realistic
shape (``bench/fixtures/episode_shapes.py``: a recorded run's turn records, ``--shapes-from`` the lines
``cua-stream tap turns --json`` printed, or stated defaults).

    .venv/bin/python bench/stream_load.py [--sessions 1 4 16 64 256] [--seconds 5] [--warmup 2]
        [--speedup 1.0] [--bootstrap host:port] [--costs-out bench/costs.json] [--shapes-from turns.jsonl]

Each session plays computer-1's part: an episode's turns back to back (every screenshot of the history in
every request, a new screenshot each turn, the completion length of the shape as ``max_tokens``, a
compaction restarting the history), then the next episode. Sessions are added point by point and keep
running, so later points see longer histories, as a fleet in steady state does. Each point waits
``--warmup`` seconds, then measures ``--seconds``. It stops after the point whose turns/s rose less than
10 % over the previous one (the knee). Records go to Kafka with ``--bootstrap`` (topics created under a
fresh prefix), else they are encoded as for Kafka and dropped. Screenshots go to a local blob store.

Columns: sessions in flight; turns/s; mean request body (KB: every screenshot of the history); client-side turn latency p50/p99 (ms); gateway CPU seconds per 1,000
turns and cores used; gateway RSS (MB) and RSS per session above the idle gateway's (MB); blob-store
MB/s written; engine busy fraction (time with a request in service / wall) and mean decode batch; the
load generator's and the engine's own cores, and the machine's 1-minute load (above its cores, every
process gets a share of a core: the gateway's knee is then its share, not its own limit).
``--costs-out`` writes the per-core costs ``cua-stream plan --costs`` reads. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.fixtures.episode_shapes import (
    DEFAULT_SHAPES,
    ShapeDistribution,
    TurnShape,
    call_records_of_tap_lines,
    sample_episode,
    shapes_from_records,
)
from cua_stream.metrics import quantile

TICKS = os.sysconf("SC_CLK_TCK")
WORD = " the"
"""One token of prompt text in the Qwen vocabulary."""


# -- the processes ----------------------------------------------------------------------------------


def serve_gateway(port: int, engine_url: str, blob_dir: str, bootstrap: str, prefix: str) -> None:
    """The gateway's process: the real ``Gateway`` and app over the tiny model's tokenizer and processor,
    an ``EngineClient`` to the simulated engine, a local blob store, and Kafka or an encoding sink."""
    import uvicorn

    from bench.gateway_overhead import EncodingSink
    from cua_stream.blobs import LocalBlobStore
    from cua_stream.bus.producer import EventProducer
    from cua_stream.config import BusConfig
    from cua_stream.gateway.app import create_app
    from cua_stream.gateway.engine_client import EngineClient
    from cua_stream.gateway.service import Gateway

    renderer = renderer_of_tiny_model()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        engine = EngineClient(engine_url)
        async with contextlib.AsyncExitStack() as stack:
            sink: Any = EncodingSink()
            if bootstrap:
                bus = BusConfig(bootstrap_servers=bootstrap, topic_prefix=prefix)
                sink = await stack.enter_async_context(EventProducer(bus))
            app.state.gateway = Gateway(
                renderer=renderer,
                engine=engine,
                sink=sink,
                blobs=LocalBlobStore(blob_dir),
                context_length=262_144,
                max_sessions=100_000,
            )
            yield
        await engine.aclose()

    uvicorn.run(create_app(lifespan=lifespan), host="127.0.0.1", port=port, log_level="warning")


def renderer_of_tiny_model() -> Any:
    from cua_stream.gateway.rendering import Renderer
    from cua_stream.models.tiny import build_processor, build_tokenizer

    processor = build_processor(build_tokenizer())
    return Renderer(processor.tokenizer, processor.image_processor)


def start(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, *argv])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{' '.join(argv)} did not answer on port {port}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


# -- the load ---------------------------------------------------------------------------------------


def png_header(size: tuple[int, int]) -> bytes:
    """A valid PNG of ``size`` (one flat colour, a few KB); screenshots are it plus unique padding after
    its end (the gateway reads only the header; the blob store hashes every byte)."""
    width, height = size
    raw = b"".join(b"\x00" + b"\x28\x3c\x5a" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def screenshot_json(base: bytes, n_bytes: int, rng: random.Random) -> bytes:
    """A user message's screenshot part, as JSON, of about ``n_bytes`` (unique bytes: no blob dedup)."""
    data = base + rng.randbytes(max(16, n_bytes - len(base)))
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    return json.dumps({"type": "image_url", "image_url": {"url": url}}).encode()


def user_json(text_tokens: int, image: bytes | None) -> bytes:
    parts = [json.dumps({"type": "text", "text": WORD * text_tokens}).encode()]
    if image is not None:
        parts.append(image)
    return b'{"role":"user","content":[' + b",".join(parts) + b"]}"


class Load:
    """The lanes (one session each, episode after episode) and what they measured."""

    def __init__(self, gateway_url: str, shapes: ShapeDistribution, seed: int) -> None:
        self.http = httpx.AsyncClient(
            base_url=gateway_url, timeout=600, limits=httpx.Limits(max_connections=None)
        )
        self.shapes, self.seed = shapes, seed
        self.base = png_header(shapes.screenshot_size)
        self.done: list[tuple[float, float, int]] = []
        """(finished at, latency s, request bytes) of every turn answered 200."""
        self.errors = 0
        self.stop = asyncio.Event()

    async def lane(self, i: int) -> None:
        rng = random.Random(self.seed * 100_003 + i)
        n = 0
        while not self.stop.is_set():
            await self.episode(rng, sample_episode(self.shapes, rng), f"l{i}-e{n}")
            n += 1

    async def episode(self, rng: random.Random, turns: tuple[TurnShape, ...], episode_id: str) -> None:
        spec = {"run_id": "load", "group_id": episode_id, "episode_id": episode_id,
                "sampling": {"temperature": 1.0}}  # fmt: skip
        created = await self.http.post("/sessions", json=spec)
        created.raise_for_status()
        sid = created.json()["session_id"]
        history: list[bytes] = []
        try:
            for turn in turns:
                if self.stop.is_set():
                    break
                shot = (
                    screenshot_json(self.base, turn.screenshot_bytes, rng) if turn.screenshot_bytes else None
                )
                text = turn.text_tokens
                if turn.compaction:  # a new root: the system prompt and task again, then the summary
                    history, text = [], turns[0].text_tokens + turn.text_tokens
                history.append(user_json(text, shot))
                body = (
                    b'{"model":"policy","temperature":1.0,"cua_call_kind":"agent_turn","max_tokens":'
                    + str(turn.completion_tokens).encode()
                    + b',"messages":['
                    + b",".join(history)
                    + b"]}"
                )
                t0 = time.monotonic()
                reply = await self.http.post(
                    f"/sessions/{sid}/v1/chat/completions",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                t1 = time.monotonic()
                if reply.status_code != 200:
                    self.errors += 1
                    break
                self.done.append((t1, t1 - t0, len(body)))
                text = reply.json()["choices"][0]["message"]["content"]
                history.append(json.dumps({"role": "assistant", "content": text}).encode())
        finally:
            await self.http.delete(f"/sessions/{sid}")


async def measure(args: argparse.Namespace, shapes: ShapeDistribution, pids: dict[str, int],
                  blob_dir: Path, engine_url: str) -> list[dict[str, Any]]:  # fmt: skip
    load = Load(f"http://127.0.0.1:{args.port}", shapes, args.seed)
    engine = httpx.AsyncClient(base_url=engine_url)
    idle_rss = rss_mb(pids["gateway"])
    points: list[dict[str, Any]] = []
    lanes: list[asyncio.Task[None]] = []
    try:
        for n in args.sessions:
            lanes += [asyncio.ensure_future(load.lane(i)) for i in range(len(lanes), n)]
            await asyncio.sleep(args.warmup)
            await engine.post("/sim/reset")
            t0, gw0, me0, blobs0 = time.monotonic(), cpu_s(pids["gateway"]), own_cpu_s(), tree_bytes(blob_dir)
            en0 = cpu_s(pids["engine"])
            errors0 = load.errors
            await asyncio.sleep(args.seconds)
            t1, gw1, me1, en1 = time.monotonic(), cpu_s(pids["gateway"]), own_cpu_s(), cpu_s(pids["engine"])
            wall = t1 - t0
            stats = (await engine.get("/sim/stats")).json()
            window = [(d, size) for end, d, size in load.done if t0 <= end < t1]
            lat = sorted(d for d, _ in window)
            turns = len(lat)
            rss = rss_mb(pids["gateway"])
            point = {
                "sessions": n,
                "turns": turns,
                "turns_per_s": turns / wall,
                "body_kb": statistics.mean(size for _, size in window) / 1024 if window else 0.0,
                "p50_ms": quantile(lat, 0.5) * 1e3 if lat else float("nan"),
                "p99_ms": quantile(lat, 0.99) * 1e3 if lat else float("nan"),
                "gateway_cpu_s_per_1000_turns": (gw1 - gw0) / turns * 1e3 if turns else float("nan"),
                "gateway_cores": (gw1 - gw0) / wall,
                "gateway_rss_mb": rss,
                "gateway_mb_per_session": (rss - idle_rss) / n,
                "blob_mb_per_s": (tree_bytes(blob_dir) - blobs0) / wall / 2**20,
                "engine_busy": stats["busy_fraction"],
                "engine_mean_batch": stats["mean_batch"],
                "client_cores": (me1 - me0) / wall,
                "engine_cores": (en1 - en0) / wall,
                "load_1m": os.getloadavg()[0],
                "errors": load.errors - errors0,
            }
            points.append(point)
            print_point(point)
            if len(points) > 1 and point["turns_per_s"] < 1.1 * points[-2]["turns_per_s"]:
                print(f"knee: turns/s rose less than 10 % from {points[-2]['sessions']} to {n} sessions")
                break
    finally:
        load.stop.set()
        await asyncio.wait(lanes, timeout=60)
        for lane in lanes:
            lane.cancel()
        await load.http.aclose()
        await engine.aclose()
    return points


HEADER = (f"{'sessions':>8} {'turns/s':>8} {'body KB':>7} {'p50 ms':>8} {'p99 ms':>8} {'cpu s/1k':>8} {'gw cores':>8}"
          f" {'rss MB':>7} {'MB/sess':>7} {'blob MB/s':>9} {'busy':>5} {'batch':>6} {'client':>6} {'engine':>6}"
          f" {'load':>5} {'err':>4}")  # fmt: skip


def print_point(p: dict[str, Any]) -> None:
    print(f"{p['sessions']:>8} {p['turns_per_s']:>8.1f} {p['body_kb']:>7.0f} {p['p50_ms']:>8.0f} {p['p99_ms']:>8.0f}"
          f" {p['gateway_cpu_s_per_1000_turns']:>8.2f} {p['gateway_cores']:>8.2f} {p['gateway_rss_mb']:>7.0f}"
          f" {p['gateway_mb_per_session']:>7.2f} {p['blob_mb_per_s']:>9.1f} {p['engine_busy']:>5.2f}"
          f" {p['engine_mean_batch']:>6.1f} {p['client_cores']:>6.2f} {p['engine_cores']:>6.2f}"
          f" {p['load_1m']:>5.1f} {p['errors']:>4}", flush=True)  # fmt: skip


def per_core_costs(points: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """The costs ``cua-stream plan`` reads: at the busiest point (the knee, or the last), the gateway's
    CPU per 1,000 turns and its memory per session in flight (both at that point's request bodies)."""
    best = max(points, key=lambda p: p["turns_per_s"])
    return {
        "measured_by": command,
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{os.cpu_count()} cores, shared with other work: noisy",
        "gateway_cpu_s_per_1000_turns": round(best["gateway_cpu_s_per_1000_turns"], 3),
        "gateway_mb_per_session": round(best["gateway_mb_per_session"], 3),
        "at_sessions": best["sessions"],
        "at_turns_per_s": round(best["turns_per_s"], 2),
        "at_body_kb": round(best["body_kb"]),
    }


def check_model(points: list[dict[str, Any]], measured: dict[str, Any]) -> None:
    """The capacity model's gateway cores at each point, from the busiest point's costs, beside the
    measured ones (the model is checked where it was not fitted)."""
    from cua_stream.capacity import gateway_cores, load_costs

    costs = load_costs(json.dumps(measured))
    print("capacity model (cua_stream.capacity.gateway_cores, costs of the busiest point) against measured:")
    for p in points:
        model = gateway_cores(p["turns_per_s"], p["body_kb"], costs)
        print(f"{p['sessions']:>8} sessions: model {model:5.2f} cores, measured {p['gateway_cores']:5.2f}"
              f" ({model / p['gateway_cores']:.2f}x)")  # fmt: skip


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "--serve-gateway":
        serve_gateway(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per point")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds after adding sessions, unmeasured")
    ap.add_argument("--speedup", type=float, default=1.0, help="the simulated engine runs k times faster")
    ap.add_argument("--port", type=int, default=39510, help="the gateway's (the engine's is the next)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bootstrap", default="", help="Kafka for the records (else encoded and dropped)")
    ap.add_argument("--costs-out", type=Path, help="write the per-core costs JSON here")
    ap.add_argument(
        "--shapes-from", type=Path, help="episode shapes from `cua-stream tap turns --json` lines"
    )
    args = ap.parse_args()
    if sorted(args.sessions) != args.sessions or args.sessions[0] < 1:
        ap.error("--sessions: increasing, from 1 up")
    shapes = DEFAULT_SHAPES
    if args.shapes_from:
        with args.shapes_from.open() as lines:
            shapes = shapes_from_records(call_records_of_tap_lines(lines), source=str(args.shapes_from))
    im_end = renderer_of_tiny_model().im_end_id
    here = Path(__file__).resolve()
    engine_port = args.port + 1
    engine_url = f"http://127.0.0.1:{engine_port}"
    prefix = f"load-{uuid.uuid4().hex[:8]}"
    if args.bootstrap:
        from cua_stream.bus.admin import TopicAdmin
        from cua_stream.config import BusConfig

        async def create() -> None:
            async with TopicAdmin(BusConfig(bootstrap_servers=args.bootstrap, topic_prefix=prefix)) as admin:
                await admin.create()

        asyncio.run(create())
    print(f"shapes: {shapes.source}")
    print(f"engine: simulated (bench/fixtures/latency_model.py, a model), speedup {args.speedup:g}; "
          f"records: {'Kafka ' + args.bootstrap if args.bootstrap else 'encoded, dropped'}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        engine = start([str(here.parent / "fixtures" / "sim_engine.py"), "--port", str(engine_port),
                        "--im-end", str(im_end), "--speedup", str(args.speedup)], engine_port)  # fmt: skip
        gateway = start([str(here), "--serve-gateway", str(args.port), engine_url, tmp, args.bootstrap or "",
                         prefix], args.port)  # fmt: skip
        try:
            print(HEADER)
            points = asyncio.run(
                measure(args, shapes, {"gateway": gateway.pid, "engine": engine.pid}, Path(tmp), engine_url)
            )
        finally:
            for process in (gateway, engine):
                process.terminate()
                process.wait(timeout=30)
    if points:
        check_model(points, per_core_costs(points, ""))
    if args.costs_out and points:
        command = "python bench/stream_load.py " + " ".join(sys.argv[1:])
        args.costs_out.write_text(json.dumps(per_core_costs(points, command), indent=2) + "\n")
        print(f"per-core costs: {args.costs_out}")
    if points:
        print(f"median gateway CPU per 1,000 turns over the points: "
              f"{statistics.median(p['gateway_cpu_s_per_1000_turns'] for p in points):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
