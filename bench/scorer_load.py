"""The scorer's curve: outcomes offered at rising rates to the real scorer daemon (``cua-stream scorer``, its
own process, as deployed), the scores it commits read back; up to its knee.

    .venv/bin/python bench/scorer_load.py [--rates 100 200 400 800 1600 3200 6400] [--seconds 5]
        [--batch 200] [--bootstrap host:port]

This process offers the outcomes (``EventProducer``, paced) and reads the scores (read_committed, as the
trainer does); the scorer is alone in its process. Per point, on fresh topics: episodes/s kept up with (the
outcomes / from the first sent to the last score read; beside the rate offered, the rate the outcomes went
out at), the outcome's send → its score read latency
p50/p99 (the scorer's poll, its transaction, the commit marker), the scorer's CPU seconds per 1,000
episodes and the cores it used (from /proc: Linux only), and this process's cores (when they reach 1, the
load generator is the limit, not the scorer). The rates rise until the knee: kept up with < 90 % of the
offered rate, or a p99 10x the first point's.

Without --bootstrap (or CUA_BOOTSTRAP_SERVERS) it starts a private local broker for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fixtures.broker import bootstrap_or_private
from bench.fixtures.curve import due, past_knee, pct
from consumers.scorer.config import ScorerConfig
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.consumer import decode_message
from cua_stream.bus.follow import Follower
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import OutcomeEvent, ScoreEvent
from cua_stream.lifecycle import freeze_startup_heap
from cua_stream.topics import OUTCOMES, SCORES

RUN = "bench"
TICKS = os.sysconf("SC_CLK_TCK")


def outcomes(n: int, point: int) -> list[OutcomeEvent]:
    """``n`` finished episodes, 4 to a group, half of them rewarded."""
    out = []
    for i in range(n):
        ids = {"run_id": RUN, "group_id": f"{RUN}-p{point}-g{i // 4}", "episode_id": f"{RUN}-p{point}-e{i}"}
        out.append(OutcomeEvent(**ids, attempt=1, task="click-button", policy_version=0, agent_started=True,
                                rewards={"reward": float(i % 2)}, n_calls=3, n_turns=3, started_at=0.0,
                                finished_at=0.0))  # fmt: skip
    return out


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def scorer(bus: BusConfig, batch: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "cua_stream", "scorer", "--bootstrap", bus.bootstrap_servers,
           "--prefix", bus.topic_prefix, "--log-level", "WARNING"]  # fmt: skip
    env = os.environ | {"CUA_SCORER_MAX_BATCH": str(batch)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def point(bootstrap: str, index: int, rate: float, seconds: float, batch: int) -> dict[str, float]:
    bus = BusConfig(bootstrap_servers=bootstrap, topic_prefix=f"bench-scorer-{uuid.uuid4().hex[:6]}")
    async with TopicAdmin(bus) as admin:
        await admin.create()
    work = outcomes(max(50, int(rate * seconds)), index)
    sent: dict[str, float] = {}
    read: dict[str, float] = {}
    daemon = scorer(bus, batch)
    try:
        async with Follower(bus, [SCORES]) as scores, EventProducer(bus) as producer:
            topics = {scores.names[0]: SCORES}
            # the scorer is up once it answers a first outcome (its group joined, its partitions assigned)
            probe = outcomes(1, -1 - index)[0]
            await producer.send(OUTCOMES, probe)
            await producer.flush()
            while probe.episode_id not in read:
                for msg in await scores.poll(0.5):
                    read[decode_message(topics, msg).event.episode_id] = time.perf_counter()
                assert daemon.poll() is None, "the scorer exited"

            async def offer() -> None:
                async for batch in due(len(work), rate):
                    for event in (work[i] for i in batch):
                        sent[event.episode_id] = time.perf_counter()
                        await producer.send(OUTCOMES, event)
                await producer.flush()

            cpu0, mine0, wall0 = cpu_s(daemon.pid), time.process_time(), time.perf_counter()
            offering = asyncio.create_task(offer())
            deadline = time.perf_counter() + seconds * 3 + 60
            while sum(1 for e in work if e.episode_id in read) < len(work):
                assert time.perf_counter() < deadline, "scores stopped coming"
                for msg in await scores.poll(0.2):
                    event = decode_message(topics, msg).event
                    assert isinstance(event, ScoreEvent)
                    read.setdefault(event.episode_id, time.perf_counter())
            await offering
            wall = time.perf_counter() - wall0
            cpu, mine = cpu_s(daemon.pid) - cpu0, time.process_time() - mine0
    finally:
        daemon.terminate()
        daemon.wait(30)
    ms = [(read[e.episode_id] - sent[e.episode_id]) * 1000 for e in work]
    last = max(read[e.episode_id] for e in work)
    return {
        "offered": rate,
        "sent": len(work) / (sent[work[-1].episode_id] - sent[work[0].episode_id]),
        "kept_up": len(work) / (last - sent[work[0].episode_id]),
        "p50": pct(ms, 0.5),
        "p99": pct(ms, 0.99),
        "cpu_per_1000": cpu / len(work) * 1000,
        "scorer_cores": cpu / wall,
        "generator_cores": mine / wall,
    }


async def main(bootstrap: str, rates: list[float], seconds: float, batch: int) -> None:
    freeze_startup_heap()
    print(f"the scorer alone (cua-stream scorer, max_batch {batch}); {seconds:g} s of outcomes a point")
    print("offered eps/s (sent) | kept up eps/s | send → score read p50 / p99 ms | scorer CPU s / 1000 | "
          "scorer cores | generator cores")  # fmt: skip
    first_p99 = None
    for i, rate in enumerate(rates):
        p = await point(bootstrap, i, rate, seconds, batch)
        first_p99 = first_p99 or p["p99"]
        print(f"{rate:13.0f} ({p['sent']:5.0f}) | {p['kept_up']:13.0f} | {p['p50']:9.1f} / {p['p99']:<9.1f}           | "
              f"{p['cpu_per_1000']:18.2f} | {p['scorer_cores']:12.2f} | {p['generator_cores']:.2f}")  # fmt: skip
        if past_knee(p["kept_up"], rate, p["p99"], first_p99):
            print(f"knee: {rate:.0f} episodes/s offered, {p['kept_up']:.0f} kept up with")
            return
    print("no knee up to the last rate")


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=float, nargs="+", default=[100, 200, 400, 800, 1600, 3200, 6400])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=ScorerConfig().max_batch, help="scorer.max_batch")
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    a = ap.parse_args()
    with bootstrap_or_private(a.bootstrap, 39196) as bootstrap:
        asyncio.run(main(bootstrap, a.rates, a.seconds, a.batch))
