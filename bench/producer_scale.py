"""Producer scalability: the real producer loop and real Kafka, with a fake environment and a fake
gateway + engine (injected latency), at 64, 256 and 512 concurrent episodes.

    .venv/bin/python bench/producer_scale.py [--episodes 64 256 512] [--turns 3]
        [--engine-latency 1.0] [--action-latency 0.5] [--bootstrap host:port]

The fake gateway runs in its own process (so its CPU is not the producer's): it opens and closes sessions
like the real one, answers each chat call after ``--engine-latency`` seconds, and publishes a turn event
per call to the turn topic. The fake environment plays ``--turns`` turns per episode, each a chat call and
an ``--action-latency`` pause. The producer itself is the daemon's own ``Producer`` (work consumer group,
admission, attempts, sessions, outcomes, the commit ledger), with concurrency = the episode count.
Measured in the producer's process: event-loop lag (a 10 ms ticker's overshoot), episodes and events
(turns + outcomes) per second, CPU per episode. Goal: 512 episodes with loop lag p99 < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import httpx
from fastapi import FastAPI, Request

from bench.fixtures.broker import bootstrap_or_private
from consumers.trainer.stream.feeder import work_for_group
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import CallKind, Logprobs, TokenIds, TurnEvent
from cua_stream.identity import outcome_of
from cua_stream.metrics import quantile
from cua_stream.topics import TURNS, WORK
from producers.config import ProducerConfig
from producers.daemon import Producer
from producers.episode import EpisodeResult, EpisodeRun
from producers.http_pool import ClientPool


def fake_gateway(port: int, latency: float, bootstrap: str, prefix: str) -> None:
    """The fake gateway + engine (run in a child process)."""
    import uvicorn

    bus = BusConfig(bootstrap_servers=bootstrap, topic_prefix=prefix, episode_partitions=4)
    sessions: dict[str, dict[str, Any]] = {}
    out: list[EventProducer] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with EventProducer(bus) as producer:
            out.append(producer)
            yield

    app = FastAPI(lifespan=lifespan)
    prompt, completion, logprobs = TokenIds(range(200)), TokenIds(range(20)), Logprobs([-0.5] * 20)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/sessions", status_code=201)
    async def create(request: Request) -> dict[str, Any]:
        spec = await request.json()
        sid = uuid.uuid4().hex
        sessions[sid] = {**spec, "n": 0}
        return {
            "session_id": sid,
            "base_url": f"/sessions/{sid}/v1",
            "session_key": sid,
            "context_length": 32768,
        }

    @app.delete("/sessions/{sid}")
    async def close(sid: str) -> dict[str, Any]:
        s = sessions.pop(sid)
        return {"n_calls": s["n"], "n_turns": s["n"], "statuses": []}

    @app.post("/sessions/{sid}/v1/chat/completions")
    async def chat(sid: str) -> dict[str, Any]:
        s = sessions[sid]
        started = time.time()
        await asyncio.sleep(latency)
        turn = TurnEvent(
            run_id=s["run_id"],
            group_id=s["group_id"],
            episode_id=s["episode_id"],
            attempt=s["attempt"],
            seq=s["n"],
            call_id=uuid.uuid4().hex,
            kind=CallKind.AGENT_TURN,
            prompt_ids=prompt,
            completion_ids=completion,
            completion_logprobs=logprobs,
            policy_version=0,
            finish_reason="stop",
            started_at=started,
        )
        s["n"] += 1
        await out[0].publish(TURNS, turn)
        return {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}
            ]
        }

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


class FakeEnvironment:
    """Plays ``turns`` turns per episode: a chat call to its session, then an action's worth of waiting."""

    def __init__(self, http: ClientPool, turns: int, action_latency: float) -> None:
        self.http, self.turns, self.action_latency = http, turns, action_latency

    async def run(self, episode: EpisodeRun) -> EpisodeResult:
        work, started = episode.work, time.time()
        headers = {"Authorization": f"Bearer {episode.session_key.reveal()}"}
        body = {"model": "fake", "messages": [{"role": "user", "content": "go"}], "temperature": 1.0}
        for _ in range(self.turns):
            http = self.http.client(work.episode_id)  # as each agent has its own LLM client
            r = await http.post(f"{episode.session_url}/chat/completions", json=body, headers=headers)
            r.raise_for_status()
            await anyio.sleep(self.action_latency)
        outcome = outcome_of(
            work,
            episode.attempt,
            agent_started=True,
            rewards={"reward": 0.0},
            started_at=started,
            finished_at=time.time(),
        )
        return EpisodeResult(outcome)


def pct(values: list[float], q: float) -> float:
    return quantile(sorted(values), q)


async def one_size(
    bootstrap: str,
    n: int,
    turns: int,
    engine_latency: float,
    action_latency: float,
    *,
    baseline: bool = False,
) -> dict:
    """One run of ``n`` episodes. ``baseline``: one connection pool per client and no start pacing (what
    the producer did before: the side-by-side reference)."""
    from producers import http_pool

    http_pool.PER_CLIENT = 1_000_000 if baseline else 16
    bus = BusConfig(
        bootstrap_servers=bootstrap, topic_prefix=f"bench-{uuid.uuid4().hex[:8]}", episode_partitions=4
    )
    async with TopicAdmin(bus) as admin:
        await admin.create()
    port = 39300 + n % 97
    gateway = subprocess.Popen(  # noqa: ASYNC220 - started once per size, before the measurement
        [
            sys.executable,
            __file__,
            "--serve-fake-gateway",
            str(port),
            str(engine_latency),
            bootstrap,
            bus.topic_prefix,
        ]
    )
    try:
        async with httpx.AsyncClient() as probe:
            for _ in range(200):
                try:
                    if (await probe.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    await anyio.sleep(0.05)
        sampling = {"temperature": 1.0}
        work = [
            w
            for g in range(n // 4)
            for w in work_for_group(
                "bench", g, tasks=["t"], group_size=4, policy_version=0, sampling=sampling, now=0
            )
        ]
        async with EventProducer(bus) as out:
            for w in work:
                await out.publish(WORK, w)
        config = ProducerConfig(
            gateway_url=f"http://127.0.0.1:{port}",
            environment="scripted",
            concurrency=n,
            bus=bus,
            **({"max_starts_per_s": 1e9} if baseline else {}),
        )
        lags: list[float] = []
        async with ClientPool(n, timeout=120) as http:
            producer = Producer(config, runner=FakeEnvironment(http, turns, action_latency))
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            async with anyio.create_task_group() as tg:
                stop = anyio.Event()
                await tg.start(lambda task_status: producer.run(stop=stop, task_status=task_status))
                t0 = time.monotonic()

                async def ticker() -> None:
                    while True:
                        t = time.monotonic()
                        await anyio.sleep(0.01)
                        lags.append(time.monotonic() - t - 0.01)

                tg.start_soon(ticker)
                while producer.published < len(work):  # noqa: ASYNC110 - a counter, polled
                    await anyio.sleep(0.05)
                wall = time.monotonic() - t0
                stop.set()
                tg.cancel_scope.cancel()
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        gateway.terminate()
        gateway.wait()
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    events = len(work) * (turns + 1)
    return {
        "episodes": len(work),
        "wall_s": wall,
        "episodes_per_s": len(work) / wall,
        "events_per_s": events / wall,
        "lag_p50_ms": pct(lags, 0.5) * 1e3,
        "lag_p99_ms": pct(lags, 0.99) * 1e3,
        "lag_max_ms": max(lags) * 1e3,
        "cpu_ms_per_episode": cpu / len(work) * 1e3,
        "ideal_s": turns * (engine_latency + action_latency),
    }


async def main(
    bootstrap: str, sizes: list[int], turns: int, engine_latency: float, action_latency: float
) -> None:
    print(f"turns/episode={turns} engine latency={engine_latency}s action latency={action_latency}s")
    print(
        "baseline = one connection pool per HTTP client, every episode started at once (the producer before)"
    )
    print(
        f"{'episodes':>8} {'wall s':>7} {'ideal s':>7} {'ep/s':>7} {'events/s':>9} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'cpu ms/ep':>9}"
    )
    for n in sizes:
        base = await one_size(bootstrap, n, turns, engine_latency, action_latency, baseline=True)
        r = await one_size(bootstrap, n, turns, engine_latency, action_latency)
        for name, x in (("baseline", base), ("producer", r)):
            print(
                f"{name:>9} {x['episodes']:>8} {x['wall_s']:>7.2f} {x['ideal_s']:>7.2f} {x['episodes_per_s']:>7.1f} "
                f"{x['events_per_s']:>9.1f} {x['lag_p50_ms']:>7.1f}m {x['lag_p99_ms']:>7.1f}m "
                f"{x['lag_max_ms']:>7.1f}m {x['cpu_ms_per_episode']:>9.2f}",
                flush=True,
            )
        print(
            f"{'ratio':>9} {n:>8}  loop lag p99 baseline/producer = {base['lag_p99_ms'] / max(r['lag_p99_ms'], 1e-9):.1f}x, "
            f"CPU per episode {base['cpu_ms_per_episode'] / r['cpu_ms_per_episode']:.1f}x, "
            f"episodes/s {r['episodes_per_s'] / base['episodes_per_s']:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    if len(sys.argv) == 6 and sys.argv[1] == "--serve-fake-gateway":
        fake_gateway(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5])
        sys.exit(0)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--engine-latency", type=float, default=1.0)
    ap.add_argument("--action-latency", type=float, default=0.5)
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    args = ap.parse_args()
    run = (args.episodes, args.turns, args.engine_latency, args.action_latency)
    with bootstrap_or_private(args.bootstrap, 39193) as bootstrap:
        asyncio.run(main(bootstrap, *run))
