"""The weight update's stall, per update mode, side by side in one run: ``drain`` (the gateway drained,
then the load) against ``in_place`` (the engine paused between decode steps under the calls in flight)
and ``retract`` (the engine's generations aborted and continued by the gateway under the new weights).

    .venv/bin/python bench/loop_async.py [--lanes 8] [--updates 4] [--step-s 2.0] [--rounds 2]

The reference engine (a never-stopping tiny Qwen3-VL, so a call runs to exactly its token budget) runs in
this process with an injected step latency (``engine.step_latency_s``, default 100 ms: a round of decode
takes that long whatever its batch, as a GPU's batched step does; it is set above the tiny model's CPU
time for a full batch, so the numbers hold on a shared machine); the real ``Gateway`` (records encoded
as for Kafka, then dropped) and a real ``EngineClient`` over HTTP serve ``--lanes`` agents that call
without pause, with long-tailed lengths (most calls short, one in eight ten times longer, as computer-use
turns are). A trainer stand-in sleeps ``--step-s`` (its fixed step time) and pushes new weights with the
trainer's own ``push_weights`` in the mode under test, ``--updates`` times. Modes alternate order per
round; medians are compared.

Columns, per mode: completion tokens/s over the run; engine busy fraction (time in decode rounds / wall);
mean batch (requests advanced per round, time-weighted); update wall (push start to end); engine idle
per update (the batch slots left empty during the update, in seconds of the whole engine: a drain's
tail of one long call counts as mostly idle); and the ratios to ``drain``.

The whole loop (producers with a scripted long-tailed environment, the scorer and the trainer as
processes; sync ``max_staleness 0`` against async 1 and 2; staleness of the trained tokens) is measured
by ``bench/loop_sync_async.py``; this one isolates the update's stall, cheaply and over many updates.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvicorn

from bench.gateway_overhead import EncodingSink
from consumers.trainer.weights import WEIGHT_UPDATE_MODES, push_weights
from cua_stream.blobs import LocalBlobStore
from cua_stream.engine.config import EngineConfig
from cua_stream.engine.scheduler import Scheduler
from cua_stream.gateway.app import create_app
from cua_stream.gateway.engine_client import EngineClient
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from cua_stream.gateway.session import SessionSpec

SHORT, LONG, LONG_EVERY = 8, 64, 8
"""Tokens of a short call and of a long one, and one call in LONG_EVERY is long."""
GATEWAY = "http://gateway"


@dataclass
class Run:
    wall_s: float = 0.0
    tokens: int = 0
    calls: int = 0
    refused: int = 0
    busy_s: float = 0.0
    slot_s: float = 0.0
    updates: list[tuple[float, float]] = field(default_factory=list)
    """(update wall, engine idle within it) per update: the idle is counted in batch slots, as
    ``lanes`` requests could run (a drain's tail of one long call leaves most of them idle), in
    seconds of the whole engine."""


def start_engine(model_dir: Path, port: int, step_latency_s: float) -> uvicorn.Server:
    from cua_stream.engine.server import build_server

    config = EngineConfig(
        model_path=str(model_dir), port=port, max_running_requests=64, step_latency_s=step_latency_s
    )
    server = build_server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


def scheduler_of(server: uvicorn.Server) -> Scheduler:
    return server.config.app.state.service.scheduler  # type: ignore[no-any-return]


async def lane(gateway: Gateway, i: int, tag: str, stop: asyncio.Event, run: Run) -> None:
    """One agent: calls back to back, each in a session of its own, until ``stop``."""
    rng = random.Random(i)
    n = 0
    while not stop.is_set():
        n += 1
        tokens = LONG if rng.randrange(LONG_EVERY) == 0 else SHORT
        sid = f"{tag}-{i}-{n}"
        gateway.create_session(
            SessionSpec(
                run_id="bench",
                group_id="g",
                episode_id=sid,
                sampling={"temperature": 1.0, "max_new_tokens": tokens},
                session_id=sid,
            )
        )
        body = {"messages": [{"role": "user", "content": f"Act on desktop {i}.{n}"}], "seed": n}
        reply = await gateway.chat(sid, body)
        if reply.status == 200:
            run.calls += 1
            run.tokens += reply.body["usage"]["completion_tokens"]
        else:
            run.refused += 1  # a drain that outlasted its hold: the agent would retry
            await asyncio.sleep(0.05)
        gateway.delete_session(sid)


async def one_run(
    mode: str, renderer: Renderer, server: uvicorn.Server, url: str, weights: list[Path], args: argparse.Namespace,
    version: list[int], tmp: Path,
) -> Run:  # fmt: skip
    engine = EngineClient(url)
    gateway = Gateway(
        renderer=renderer,
        engine=engine,
        sink=EncodingSink(),
        blobs=LocalBlobStore(tmp / mode),
        context_length=128_000,
        drain_hold_s=30.0,  # new calls wait for the update rather than being refused
    )
    mounts: dict[str, httpx.AsyncBaseTransport] = {GATEWAY: httpx.ASGITransport(app=create_app(gateway))}
    scheduler = scheduler_of(server)
    run = Run()
    stop = asyncio.Event()
    async with httpx.AsyncClient(mounts=mounts, timeout=600) as http:
        busy0, slot0, started = scheduler.busy_s, scheduler.slot_s, time.perf_counter()
        lanes = [
            asyncio.create_task(lane(gateway, i, f"{mode}-{version[0]}", stop, run))
            for i in range(args.lanes)
        ]
        for _ in range(args.updates):
            await asyncio.sleep(args.step_s)  # the trainer's step
            version[0] += 1
            t0, s0 = time.perf_counter(), scheduler.slot_s
            await push_weights(
                http,
                engine_url=url,
                gateway_url=GATEWAY,
                weights=weights[version[0] % 2],
                version=version[0],
                mode=mode,
            )
            wall = time.perf_counter() - t0
            used = (scheduler.slot_s - s0) / args.lanes
            run.updates.append((wall, max(0.0, wall - used)))
        await asyncio.sleep(args.step_s)
        stop.set()
        run.wall_s = time.perf_counter() - started
        run.busy_s, run.slot_s = scheduler.busy_s - busy0, scheduler.slot_s - slot0
        await asyncio.gather(*lanes)
    await engine.aclose()
    return run


def summary(runs: list[Run]) -> dict[str, float]:
    med = statistics.median
    return {
        "tok_s": med(r.tokens / r.wall_s for r in runs),
        "busy": med(r.busy_s / r.wall_s for r in runs),
        "batch": med(r.slot_s / r.busy_s for r in runs if r.busy_s),
        "update_s": med(w for r in runs for w, _ in r.updates),
        "calls": med(r.calls / r.wall_s for r in runs),
        "idle_s": med(i for r in runs for _, i in r.updates),
        "refused": sum(r.refused for r in runs),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=2.0)
    parser.add_argument("--step-latency-s", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", nargs="+", choices=WEIGHT_UPDATE_MODES, default=list(WEIGHT_UPDATE_MODES))
    args = parser.parse_args()

    from cua_stream.models.tiny import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        weights = [make_tiny_model(Path(tmp) / f"w{s}", seed=s, never_stops=True) for s in (0, 1)]
        renderer = Renderer.from_pretrained(str(weights[0]))
        port = 31500
        server = start_engine(weights[0], port, args.step_latency_s)
        url = f"http://127.0.0.1:{port}"
        version = [0]
        runs: dict[str, list[Run]] = {m: [] for m in args.modes}
        for r in range(args.rounds):
            for mode in args.modes if r % 2 == 0 else reversed(args.modes):
                runs[mode].append(
                    await one_run(mode, renderer, server, url, weights, args, version, Path(tmp))
                )
        server.should_exit = True

    rows = {m: summary(rs) for m, rs in runs.items()}
    base = rows[args.modes[0]]
    print(
        f"{args.lanes} lanes, calls of {SHORT} tokens and 1 in {LONG_EVERY} of {LONG}, step latency "
        f"{args.step_latency_s * 1e3:.0f} ms, {args.updates} updates {args.step_s:g} s apart, {args.rounds} rounds"
    )
    print(
        f"{'mode':>9} | {'tok/s':>7} {'busy':>5} {'batch':>5} | {'update s':>8} {'idle s':>7} | "
        f"{'tok/s vs ' + args.modes[0]:>16} {'idle vs ' + args.modes[0]:>15} | calls/s refused"
    )
    for mode, row in rows.items():
        idle_ratio = row["idle_s"] / base["idle_s"] if base["idle_s"] else float("nan")
        print(
            f"{mode:>9} | {row['tok_s']:>7.1f} {row['busy']:>5.2f} {row['batch']:>5.1f} | "
            f"{row['update_s']:>8.2f} {row['idle_s']:>7.2f} | {row['tok_s'] / base['tok_s']:>16.2f} "
            f"{idle_ratio:>15.2f} | {row['calls']:>7.1f} {row['refused']:.0f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
