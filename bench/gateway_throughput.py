"""Gateway + reference engine throughput at 1, 4 and 8 concurrent sessions, and what a long generation
does to short ones: the engine serving one request at a time (``max_running_requests=1``, as it did
before the scheduler) against interleaved decoding (the default), measured side by side in one run.

    .venv/bin/python bench/gateway_throughput.py [--sessions 1 4 8] [--turns 4] [--rounds 3]

Two engines over the same tiny Qwen3-VL run in this process (uvicorn threads), one per mode; rounds
alternate between them and medians are compared. Sessions go through a real ``Gateway`` (tokenizer,
processor arithmetic, blob store, records encoded as for Kafka) and a real ``EngineClient`` over HTTP.
Each session plays ``--turns`` computer-1-like turns with a small screenshot each; replies are seeded.

Columns: turns/s and completion tokens/s per mode and concurrency; ``short p50/max``: latency of six
8-token requests sent together while a 400-token generation runs, per mode. On two CPU cores interleaving cannot add much
throughput (every step uses the cores already); what it buys is that short requests are not stuck behind
a long one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvicorn

from bench.gateway_overhead import EncodingSink, screenshot, user
from cua_stream.blobs import LocalBlobStore
from cua_stream.engine.config import EngineConfig
from cua_stream.gateway.engine_client import EngineClient
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from cua_stream.gateway.session import SessionSpec

PROMPT = "<|im_start|>user\nDescribe the desktop.<|im_end|>\n<|im_start|>assistant\n"


def start_engine(model_dir: Path, port: int, max_running: int) -> uvicorn.Server:
    from cua_stream.engine.server import build_server

    server = build_server(
        EngineConfig(model_path=str(model_dir), port=port, max_running_requests=max_running)
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


async def sessions_round(gateway: Gateway, n: int, turns: int, tag: str) -> tuple[float, int, int]:
    """(seconds, turns, completion tokens) for ``n`` sessions of ``turns`` turns, concurrently."""
    tokens = 0

    async def one(i: int) -> None:
        nonlocal tokens
        session = gateway.create_session(
            SessionSpec(
                run_id="bench",
                group_id="g",
                episode_id=f"{tag}-{i}",
                sampling={"temperature": 1.0, "max_new_tokens": 16},
                session_id=f"{tag}-{i}",
            )
        )
        messages: list[dict[str, Any]] = [user("Task: open the settings", screenshot(i, (320, 180)))]
        for t in range(turns):
            reply = await gateway.chat(session.session_id, {"messages": messages, "seed": 1000 * i + t})
            assert reply.status == 200, reply.body
            tokens += reply.body["usage"]["completion_tokens"]
            text = reply.body["choices"][0]["message"]["content"]
            if reply.body["choices"][0]["finish_reason"] == "length":
                break  # computer-1 would end the episode here
            messages += [{"role": "assistant", "content": text}, user("", screenshot(i + t + 1, (320, 180)))]
        gateway.delete_session(session.session_id)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - started, n * turns, tokens


async def starvation(url: str, shorts: int = 6) -> list[float]:
    """Latencies of short requests sent together while a long generation runs."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        body = {"text": PROMPT, "return_logprob": True}
        long = asyncio.ensure_future(
            http.post(
                "/generate",
                json={
                    **body,
                    "sampling_params": {"max_new_tokens": 400, "ignore_eos": True, "sampling_seed": 1},
                },
            )
        )
        await asyncio.sleep(0.3)  # well into the long one

        async def short(i: int) -> float:
            t0 = time.perf_counter()
            params = {"max_new_tokens": 8, "ignore_eos": True, "sampling_seed": i}
            r = await http.post("/generate", json={**body, "sampling_params": params})
            assert r.status_code == 200
            return time.perf_counter() - t0

        latencies = await asyncio.gather(*(short(i) for i in range(shorts)))
        await long
    return list(latencies)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from cua_stream.app.demo import tiny_model_dir

    model = tiny_model_dir()
    renderer = Renderer.from_pretrained(str(model))
    modes = {"serial": 1, "interleaved": 16}
    urls = {}
    for k, (mode, running) in enumerate(modes.items()):
        start_engine(model, 31400 + k, running)
        urls[mode] = f"http://127.0.0.1:{31400 + k}"
    results: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
    short: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else reversed(modes):  # alternate the order
                engine = EngineClient(urls[mode])
                gateway = Gateway(
                    renderer=renderer,
                    engine=engine,
                    sink=EncodingSink(),
                    blobs=LocalBlobStore(Path(tmp) / mode),
                    context_length=128_000,
                )
                for n in args.sessions:
                    results.setdefault((mode, n), []).append(
                        await sessions_round(gateway, n, args.turns, f"{mode}-{r}-{n}")
                    )
                short[mode] += await starvation(urls[mode])
                await engine.aclose()
    print(
        f"{'sessions':>8} | {'serial turns/s':>14} {'tok/s':>7} | {'interleaved turns/s':>19} {'tok/s':>7} | ratio"
    )
    for n in args.sessions:
        row = []
        for mode in modes:
            runs = results[(mode, n)]
            secs = statistics.median(s for s, _, _ in runs)
            row.append(
                (
                    statistics.median(t / s for s, t, _ in runs),
                    statistics.median(k / s for s, _, k in runs),
                    secs,
                )
            )
        (st, sk, _), (it, ik, _) = row
        print(f"{n:>8} | {st:>14.2f} {sk:>7.1f} | {it:>19.2f} {ik:>7.1f} | {it / st:.2f}")
    for mode in modes:
        lat = sorted(short[mode])
        print(
            f"short requests beside a 400-token generation, {mode:>11}: p50 {statistics.median(lat) * 1e3:7.0f} ms, max {lat[-1] * 1e3:7.0f} ms"
        )
    ratio = statistics.median(short["serial"]) / statistics.median(short["interleaved"])
    print(f"short-request p50, serial / interleaved: {ratio:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
