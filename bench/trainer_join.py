"""Trainer join throughput and memory: turn and score events read from the real broker, joined into GRPO
groups and assembled into samples, as the trainer does (its ``Join`` and ``assemble``; no model), against
a plain consume + decode of the same records, side by side in one run.

    .venv/bin/python bench/trainer_join.py [--groups 2000] [--group-size 4] [--turns 5] [--bootstrap host:port]
    .venv/bin/python bench/trainer_join.py --curve 1000 2000 4000 8000 [--seconds 6] --bootstrap host:port

Each episode is ``--turns`` computer-1-like calls (a 300-token prompt delta with one screenshot reference,
a 100-token completion with logprobs), then its score. The join's resident memory is sampled as groups are
seen: it must stay flat (a decided group is forgotten; screenshots travel by reference).
Goal: >= 5,000 turn events/s joined, memory flat.

``--curve``: joined turn events/s against offered (the writer paced to each rate, live, fresh topics per
point), the group latency (its last score sent → its group decided) p50/p99, CPU seconds per 1,000 turn
events, cores and RSS of this process (writer and join together: one core at most), and the knee: the lowest offered rate joined
at less than ``KEEP_UP`` of it. Without ``--bootstrap`` the curve is not run (a local broker serves the
default mode only).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import resource
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import TopicPartition

from bench.fixtures.broker import bootstrap_or_private
from consumers.trainer.episodes.samples import assemble
from consumers.trainer.stream.intake import set_barriers
from consumers.trainer.stream.join import Join
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.consumer import (
    decode_message,
    make_kafka_consumer,
    partitions_of,
    start_consumer,
    stop_consumer,
)
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import CallKind, ImageRef, Logprobs, Reward, ScoreEvent, TokenIds, TurnEvent
from cua_stream.metrics import quantile
from cua_stream.topics import SCORES, TURNS

KEEP_UP = 0.9
"""A curve's point kept up when it joined at least this share of the offered turn events/s."""


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def wait_s(rate: float, sent: int, elapsed_s: float) -> float:
    """How long an offered load of ``rate`` turn events a second waits, ``elapsed_s`` into a point with
    ``sent`` sent, before the next: until the schedule reaches ``sent`` (none when behind it)."""
    if rate <= 0:
        raise ValueError("rate must be > 0")
    return max(0.0, sent / rate - elapsed_s)


def knee(points: Sequence[tuple[float, float]], keep_up: float = KEEP_UP) -> float | None:
    """The lowest offered rate whose achieved rate fell below ``keep_up`` of it (points: offered,
    achieved turn events/s), None if every point kept up."""
    fell = [offered for offered, achieved in points if achieved < keep_up * offered]
    return min(fell) if fell else None


async def publish(
    bus: BusConfig, groups: int, group_size: int, turns: int, *, rate: float | None = None,
    scored_at: dict[str, float] | None = None,
) -> int:  # fmt: skip
    """Every group's turns then scores; ``rate``: turn events a second at most (paced per episode), and
    each group's last score's send time in ``scored_at``."""
    rng = random.Random(1)
    n = 0
    started = time.perf_counter()
    # Token values do not matter to the join: one set of arrays, shared (building them dominated the run).
    prompt = TokenIds(rng.randrange(151_000) for _ in range(300))
    completion = TokenIds(rng.randrange(151_000) for _ in range(100))
    logprobs = Logprobs(-rng.random() for _ in range(100))
    async with EventProducer(bus) as producer:
        for g in range(groups):
            for e in range(group_size):
                if rate is not None and (wait := wait_s(rate, n, time.perf_counter() - started)) > 0:
                    await asyncio.sleep(wait)
                ids = {"run_id": "bench", "group_id": f"g{g}", "episode_id": f"g{g}-e{e}"}
                for seq in range(turns):
                    await producer.send(
                        TURNS,
                        TurnEvent(
                            **ids,
                            seq=seq,
                            call_id=f"g{g}-e{e}-c{seq}",
                            parent_call_id=None if seq == 0 else f"g{g}-e{e}-c{seq - 1}",
                            kind=CallKind.AGENT_TURN,
                            prompt_ids=prompt,
                            completion_ids=completion,
                            completion_logprobs=logprobs,
                            images=(
                                ImageRef(
                                    sha256=f"{rng.getrandbits(256):064x}", size=60_000, width=1280, height=720
                                ),
                            ),
                            policy_version=0,
                            finish_reason="stop",
                            started_at=0.0,
                        ),
                    )
                    n += 1
                score = ScoreEvent(**ids, verdict=Reward(value=float(e % 2)), policy_version=0, scored_at=0.0)
                await producer.send(SCORES, score)
            if scored_at is not None:
                scored_at[f"g{g}"] = time.perf_counter()
        await producer.flush()
    return n


async def consume(
    bus: BusConfig,
    expected: int,
    *,
    join_groups: Join | None,
    samples: list[int],
    memory: list[tuple[int, float]],
    decided_at: dict[str, float] | None = None,
) -> float:
    """Seconds to read every record (and join them, if ``join_groups``)."""
    names = {bus.topics().name_of(s): s for s in (TURNS, SCORES)}
    consumer = make_kafka_consumer(
        bus, group_id=None, max_poll_records=2000, fetch_max_bytes=64 * 1024 * 1024
    )
    await start_consumer(consumer, bus)
    tps = [TopicPartition(n, p) for n in names for p in await partitions_of(consumer, n)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    seen = decided = 0
    started = time.perf_counter()
    try:
        while seen < expected:
            polled = await consumer.getmany(timeout_ms=500)
            completed = []
            for msgs in polled.values():
                for msg in msgs:
                    delivery = decode_message(names, msg)
                    seen += 1
                    if join_groups is None:
                        continue
                    if (complete := join_groups.add(delivery, 0.0)) is not None:
                        completed.append(complete)
            if join_groups is None:
                continue
            await set_barriers(Ends(consumer), join_groups, completed)  # type: ignore[arg-type]  # the daemon's own barrier step
            positions = {(tp.topic, tp.partition): await consumer.position(tp) for tp in tps}
            for group in join_groups.ready(positions):
                for episode in group.episodes.values():
                    samples[0] += len(assemble(episode.calls).samples)
                join_groups.close(group.group_id)
                if decided_at is not None:
                    decided_at[group.group_id] = time.perf_counter()
                decided += 1
                if decided % 250 == 0:
                    memory.append((decided, rss_mb()))
    finally:
        await stop_consumer(consumer)
    return time.perf_counter() - started


class Ends:
    """A plain consumer as ``set_barriers`` reads the trainer's ``Follower``: end offsets by (topic,
    partition)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        ends = await self.consumer.end_offsets([TopicPartition(t, p) for t, p in partitions])
        return {(tp.topic, tp.partition): end for tp, end in ends.items()}


async def fresh(bootstrap: str) -> BusConfig:
    bus = BusConfig(
        bootstrap_servers=bootstrap, topic_prefix=f"bench-join-{uuid.uuid4().hex[:6]}", episode_partitions=4
    )
    async with TopicAdmin(bus) as admin:
        await admin.create((TURNS, SCORES))
    return bus


async def main(bootstrap: str, groups: int, group_size: int, turns: int) -> None:
    n_turns, total = groups * group_size * turns, groups * group_size * (turns + 1)
    print(
        f"{groups} groups x {group_size} episodes x {turns} turns: {n_turns} turn events + {groups * group_size} scores"
    )
    # Backlog: everything is in the log first (a trainer catching up), then read twice.
    bus = await fresh(bootstrap)
    await publish(bus, groups, group_size, turns)
    plain = await consume(bus, total, join_groups=None, samples=[0], memory=[])
    samples, memory = [0], [(0, rss_mb())]
    join = Join("bench", group_size, [bus.topics().name_of(TURNS)])
    joined = await consume(bus, total, join_groups=join, samples=samples, memory=memory)
    print(f"backlog: consume + decode only    : {n_turns / plain:8.0f} turn events/s")
    print(f"backlog: consume + join + samples : {n_turns / joined:8.0f} turn events/s ({samples[0]} samples)")
    print("backlog: resident MB by groups decided: " + ", ".join(f"{g}: {m:.0f}" for g, m in memory[::2]))
    # Live: the join reads while the groups are being written (the trainer's steady state).
    bus = await fresh(bootstrap)
    samples, memory = [0], [(0, rss_mb())]
    join = Join("bench", group_size, [bus.topics().name_of(TURNS)])
    started = time.perf_counter()
    await asyncio.gather(
        publish(bus, groups, group_size, turns),
        consume(bus, total, join_groups=join, samples=samples, memory=memory),
    )
    wall = time.perf_counter() - started
    print(f"live: written and joined          : {n_turns / wall:8.0f} turn events/s ({samples[0]} samples)")
    print("live: resident MB by groups decided: " + ", ".join(f"{g}: {m:.0f}" for g, m in memory[::2]))
    rate = n_turns / joined
    print(f"goal >= 5,000 turn events/s joined: {'met' if rate >= 5000 else 'NOT met'} ({rate:.0f})")


async def curve(bootstrap: str, rates: list[float], seconds: float, group_size: int, turns: int) -> None:
    """Joined turn events/s against offered, live (written while read), each rate on fresh topics: the
    group latency is its last score's send to its decision (ready and assembled); CPU is this process's
    (the writer's and the join's together)."""
    print(f"curve: {seconds:g} s a point, groups of {group_size} x {turns} turns; CPU and RSS: this process")
    print(
        f"{'offered/s':>9} {'sent/s':>8} {'joined/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'cpu s/1k':>8} {'cores':>5} {'rss MB':>6}"
    )
    points = []
    for rate in rates:
        groups = max(1, round(rate * seconds / (group_size * turns)))
        n_turns, total = groups * group_size * turns, groups * group_size * (turns + 1)
        bus = await fresh(bootstrap)
        join = Join("bench", group_size, [bus.topics().name_of(TURNS)])
        scored_at: dict[str, float] = {}
        decided_at: dict[str, float] = {}
        cpu0, started = process_cpu_s(), time.perf_counter()
        sending = asyncio.ensure_future(
            publish(bus, groups, group_size, turns, rate=rate, scored_at=scored_at)
        )
        await consume(bus, total, join_groups=join, samples=[0], memory=[], decided_at=decided_at)
        wall, cpu = time.perf_counter() - started, process_cpu_s() - cpu0
        await sending
        sent_wall = max(scored_at.values()) - started
        lat = sorted(decided_at[g] - scored_at[g] for g in decided_at)
        points.append((rate, n_turns / wall))
        print(f"{rate:>9.0f} {n_turns / sent_wall:>8.0f} {n_turns / wall:>8.0f} {quantile(lat, 0.5) * 1e3:>7.1f}"
              f" {quantile(lat, 0.99) * 1e3:>7.1f} {cpu / n_turns * 1e3:>8.3f} {cpu / wall:>5.2f} {rss_mb():>6.0f}", flush=True)  # fmt: skip
    fell = knee(points)
    print(
        f"knee: {'joined fell below ' + format(KEEP_UP, '.0%') + ' of offered at ' + format(fell, '.0f') + '/s' if fell else 'every point kept up'}"
    )


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--curve", type=float, nargs="+", help="offered turn events/s, point by point, live")
    ap.add_argument("--seconds", type=float, default=6.0, help="--curve: seconds of load a point")
    args = ap.parse_args()
    with bootstrap_or_private(args.bootstrap, 39192) as bootstrap:
        if args.curve:
            asyncio.run(curve(bootstrap, args.curve, args.seconds, args.group_size, args.turns))
        else:
            asyncio.run(main(bootstrap, args.groups, args.group_size, args.turns))
