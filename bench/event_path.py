"""The event path: producer → Kafka → scorer → a group ready in the trainer, against raw aiokafka moving the
same bytes along the same path, side by side in one run (rounds alternate, medians compared).

    .venv/bin/python bench/event_path.py [--groups 300] [--group-size 4] [--turns 3] [--rate 20] [--rounds 5] [--warmup 1] [--batch 200]
    .venv/bin/python bench/event_path.py --curve 25 50 100 200 400 800 [--seconds 5]

cua-stream: a producer's ``EventProducer`` writes each episode's turns, then its outcome; the real scorer
(``Scorer``: the exactly-once transform, a Kafka transaction per batch) turns outcomes into scores; the
trainer's own reading (``Follower`` over its inputs, ``Join``, the barrier) says when a group is ready.
Raw: the same encoded bytes, to the same partitions, written by a plain idempotent producer; a relay
consumer that answers each outcome with its score's bytes and commits its offsets; a reader that counts a
group's records. Two measures:

- throughput: every group written at once (a backlog), episodes per second until the last group is ready;
- latency: groups written at ``--rate`` groups/s; per group, the last outcome's send to the group ready.

``--curve R1 R2 ...``: instead, the stage's curve: at each offered rate (groups/s, ``--seconds`` of them)
both paths side by side, the episodes/s they kept up with, the outcome → group-ready latency p50/p99, the
scorer's share of it, and this process's CPU seconds per 1,000 episodes (it runs the producer, the scorer
and the trainer's reading, or raw's three): the rates rise until cua-stream's knee (kept up with < 90 % of
the offered rate, or a p99 10x the first point's), which is printed last.

Without --bootstrap (or CUA_BOOTSTRAP_SERVERS) it starts a private local broker for the run. The process's
startup heap is frozen first (``freeze_startup_heap``, as the daemons do once ready), for both paths.
Goals: cua-stream / raw throughput >= 0.8; cua-stream p99 latency < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from bench.fixtures.broker import bootstrap_or_private
from bench.fixtures.curve import past_knee, pct
from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from consumers.trainer.stream.intake import INPUTS, set_barriers
from consumers.trainer.stream.join import Join
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.codec import encode_record
from cua_stream.bus.consumer import decode_message
from cua_stream.bus.follow import Follower
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import (
    CallKind,
    Event,
    ImageRef,
    Logprobs,
    OutcomeEvent,
    Reward,
    ScoreEvent,
    TokenIds,
    TurnEvent,
)
from cua_stream.lifecycle import freeze_startup_heap
from cua_stream.topics import OUTCOMES, SCORES, TURNS, TopicSpec, partition_of

RUN = "bench"
Raw = tuple[str, bytes, bytes, list[tuple[str, bytes]]]
"""A record as raw aiokafka sends it: topic, key, value, headers."""
RAW_PRODUCER = {"enable_idempotence": True, "acks": "all", "linger_ms": 5, "max_batch_size": 512 * 1024,
                "max_request_size": 8 * 1024 * 1024}  # fmt: skip
"""The raw producer's settings: what ``EventProducer`` sets (idempotent, acks=all), nothing more."""


@dataclass
class Episode:
    group_id: str
    turns: list[TurnEvent]
    outcome: OutcomeEvent
    score: ScoreEvent


def episodes(groups: int, group_size: int, turns: int) -> list[list[Episode]]:
    """Computer-1-like episodes: each turn a 300-token prompt delta with one screenshot reference and a
    100-token completion with logprobs."""
    rng = random.Random(1)
    prompt = TokenIds(rng.randrange(151_000) for _ in range(300))
    completion = TokenIds(rng.randrange(151_000) for _ in range(100))
    logprobs = Logprobs(-rng.random() for _ in range(100))
    out = []
    for g in range(groups):
        group = []
        for e in range(group_size):
            ids = {"run_id": RUN, "group_id": f"{RUN}-g{g}", "episode_id": f"{RUN}-g{g}-e{e}", "attempt": 1}
            calls = [
                TurnEvent(**ids, seq=s, call_id=f"g{g}-e{e}-c{s}", parent_call_id=None if s == 0 else f"g{g}-e{e}-c{s - 1}",
                          kind=CallKind.AGENT_TURN, prompt_ids=prompt, completion_ids=completion,
                          completion_logprobs=logprobs, policy_version=0, finish_reason="stop", started_at=0.0,
                          images=(ImageRef(sha256=f"{rng.getrandbits(256):064x}", size=60_000, width=1280, height=720),))
                for s in range(turns)
            ]  # fmt: skip
            outcome = OutcomeEvent(**ids, task="click-button", policy_version=0, agent_started=True,
                                   rewards={"reward": float(e % 2)}, n_calls=turns, n_turns=turns,
                                   started_at=0.0, finished_at=0.0)  # fmt: skip
            score = ScoreEvent(**ids, verdict=Reward(value=float(e % 2)), policy_version=0, scored_at=0.0)
            group.append(Episode(f"{RUN}-g{g}", calls, outcome, score))
        out.append(group)
    return out


@dataclass
class Timing:
    sent: dict[str, float] = field(default_factory=dict)
    """Per group: when its last outcome was sent."""
    scored: dict[str, float] = field(default_factory=dict)
    """Per group (cua-stream): when the trainer's reader saw its last score."""
    ready: dict[str, float] = field(default_factory=dict)
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)

    def mark_ready(self, group_id: str, expected: int) -> None:
        self.ready[group_id] = time.perf_counter()
        if len(self.ready) == expected:
            self.all_ready.set()

    def latencies_ms(self) -> list[float]:
        return sorted((self.ready[g] - self.sent[g]) * 1000 for g in self.ready)

    def scoring_ms(self) -> list[float]:
        """Per group: the last outcome's send to its last score read (the scorer's share, transactions
        included)."""
        return sorted((self.scored[g] - self.sent[g]) * 1000 for g in self.scored if g in self.sent)


async def paced(
    groups: list[list[Episode]], rate: float, send_group: Callable[[list[Episode]], Awaitable[None]]
) -> None:
    start = time.perf_counter()
    for i, group in enumerate(groups):
        if rate:
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        await send_group(group)


# -- cua-stream ------------------------------------------------------------------------------------------


async def cua_round(
    bootstrap: str, groups: list[list[Episode]], rate: float, batch: int
) -> tuple[float, Timing]:
    bus = await fresh(bootstrap, "cua")
    timing, stop = Timing(), anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(
            partial(Scorer(ScorerConfig(bus=bus, max_batch=batch)).run, stop=stop)
        )  # started: its partitions assigned
        ready = asyncio.Event()
        tg.start_soon(cua_trainer_side, bus, len(groups), len(groups[0]), timing, ready)
        await ready.wait()
        async with EventProducer(bus) as producer:

            async def send_group(group: list[Episode]) -> None:
                for ep in group:
                    for turn in ep.turns:
                        await producer.send(TURNS, turn)
                timing.sent[group[0].group_id] = time.perf_counter()
                for ep in group:
                    await producer.send(OUTCOMES, ep.outcome)

            started = time.perf_counter()
            await paced(groups, rate, send_group)
            await producer.flush()
            await timing.all_ready.wait()
            wall = time.perf_counter() - started
        stop.set()
    return wall, timing


async def cua_trainer_side(
    bus: BusConfig, n_groups: int, group_size: int, timing: Timing, ready: asyncio.Event
) -> None:
    """The trainer daemon's reading loop, without the steps: poll, join, barrier, ready."""
    async with Follower(bus, INPUTS) as inputs:
        by_name = {bus.topics().name_of(s): s for s in INPUTS}
        join = Join(RUN, group_size, [bus.topics().name_of(TURNS)])
        ready.set()
        while not timing.all_ready.is_set():
            completed = []
            for msg in await inputs.poll(0.2):
                if (complete := join.add(decode_message(by_name, msg), 0.0)) is not None:
                    completed.append(complete)
                    timing.scored[complete.group_id] = time.perf_counter()
            await set_barriers(inputs, join, completed)
            for group in join.ready(await inputs.positions()):
                join.close(group.group_id)
                timing.mark_ready(group.group_id, n_groups)


# -- raw aiokafka ----------------------------------------------------------------------------------------


async def raw_round(
    bootstrap: str, groups: list[list[Episode]], rate: float, batch: int
) -> tuple[float, Timing]:
    bus = await fresh(bootstrap, "raw")
    topics = bus.topics()
    names = {spec: topics.name_of(spec) for spec in (TURNS, OUTCOMES, SCORES)}

    def record(spec: TopicSpec, event: Event) -> Raw:
        rec = encode_record(names[spec], spec, event)
        return rec.topic, rec.key, rec.value, list(rec.headers)

    encoded = [
        [([record(TURNS, t) for t in ep.turns], record(OUTCOMES, ep.outcome), record(SCORES, ep.score)) for ep in g]
        for g in groups
    ]  # fmt: skip
    scores = {out[2]: score for g in encoded for _, out, score in g}  # an outcome's bytes → its score's
    timing, stop = Timing(), asyncio.Event()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **RAW_PRODUCER)
    await producer.start()
    parts = len(await producer.partitions_for(names[TURNS]))
    keys = {g[0].group_id.encode() for g in groups}
    # Raw sends through aiokafka's own partitioner, which places every key where cua-stream's does.
    assert all(DefaultPartitioner()(k, list(range(parts)), []) == partition_of(k, parts) for k in keys)

    async def send(rec: Raw) -> None:
        topic, key, value, headers = rec
        await producer.send(topic, value, key=key, headers=headers)

    ready = asyncio.Event()
    relaying = asyncio.create_task(raw_relay(bootstrap, names, scores, producer, batch, stop, ready))
    reading = asyncio.create_task(raw_trainer_side(bootstrap, names, groups, timing))
    await ready.wait()
    index = {g[0].group_id: e for g, e in zip(groups, encoded, strict=True)}

    async def send_group(group: list[Episode]) -> None:
        for calls, _, _ in index[group[0].group_id]:
            for rec in calls:
                await send(rec)
        timing.sent[group[0].group_id] = time.perf_counter()
        for _, outcome, _ in index[group[0].group_id]:
            await send(outcome)

    started = time.perf_counter()
    await paced(groups, rate, send_group)
    await producer.flush()
    await timing.all_ready.wait()
    wall = time.perf_counter() - started
    stop.set()
    await asyncio.gather(relaying, reading)
    await producer.stop()
    return wall, timing


async def raw_relay(
    bootstrap: str,
    names: dict[TopicSpec, str],
    scores: dict[bytes, Raw],
    producer: AIOKafkaProducer,
    batch: int,
    stop: asyncio.Event,
    ready: asyncio.Event,
) -> None:
    """Each outcome answered with its score's bytes; offsets committed after each batch (of the scorer's
    ``max_batch`` at most, as the scorer's transactions are)."""
    consumer = AIOKafkaConsumer(
        names[OUTCOMES],
        bootstrap_servers=bootstrap,
        group_id=f"{names[OUTCOMES]}.relay",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=batch,
    )
    await consumer.start()
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=100)
    ready.set()
    try:
        while not stop.is_set():
            polled = await consumer.getmany(timeout_ms=200)
            for msgs in polled.values():
                for msg in msgs:
                    topic, key, value, headers = scores[msg.value]
                    await producer.send(topic, value, key=key, headers=headers)
            if polled:
                await producer.flush()
                await consumer.commit()
    finally:
        await consumer.stop()


async def raw_trainer_side(
    bootstrap: str, names: dict[TopicSpec, str], groups: list[list[Episode]], timing: Timing
) -> None:
    """A group is ready when all its turns and scores are read."""
    wanted = {g[0].group_id.encode(): sum(len(ep.turns) + 1 for ep in g) for g in groups}
    seen: Counter[bytes] = Counter()
    consumer = AIOKafkaConsumer(names[TURNS], names[SCORES], bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        while not timing.all_ready.is_set():
            for msgs in (await consumer.getmany(timeout_ms=200)).values():
                for msg in msgs:
                    seen[msg.key] += 1
                    if seen[msg.key] == wanted[msg.key]:
                        timing.mark_ready(msg.key.decode(), len(groups))
    finally:
        await consumer.stop()


# -- the run ---------------------------------------------------------------------------------------------


async def fresh(bootstrap: str, which: str) -> BusConfig:
    bus = BusConfig(bootstrap_servers=bootstrap, topic_prefix=f"bench-path-{which}-{uuid.uuid4().hex[:6]}",
                    episode_partitions=4)  # fmt: skip
    async with TopicAdmin(bus) as admin:
        await admin.create()
    return bus


async def main(
    bootstrap: str,
    n_groups: int,
    group_size: int,
    turns: int,
    rate: float,
    rounds: int,
    warmup: int,
    batch: int,
) -> None:
    groups = episodes(n_groups, group_size, turns)
    n = n_groups * group_size
    # This process stands for the producer, the scorer and the trainer, each of which freezes its startup
    # heap once ready (their ``serve``); both paths run in it, so both get the same collector.
    freeze_startup_heap()
    print(
        f"{n_groups} groups x {group_size} episodes x {turns} turns ({n} episodes); latency at {rate:g} groups/s;"
        f" at most {batch} outcomes per transaction"
    )
    # The broker's JVM compiles its hot paths during the first rounds (a first backlog here ran at half the
    # speed of the third), so uncounted backlog rounds of both paths come first.
    for r in range(warmup):
        for name, fn in (("cua-stream", cua_round), ("raw", raw_round)):
            wall, _ = await fn(bootstrap, groups, 0.0, batch)
            print(f"  warm-up {r + 1} {name:<10}: backlog {n / wall:7.0f} episodes/s (not counted)")
    walls: dict[str, list[float]] = {"cua-stream": [], "raw": []}
    lat: dict[str, list[float]] = {"cua-stream": [], "raw": []}
    scoring: list[float] = []
    for r in range(rounds):
        for name, fn in (("cua-stream", cua_round), ("raw", raw_round))[:: 1 if r % 2 == 0 else -1]:
            wall, _ = await fn(bootstrap, groups, 0.0, batch)
            walls[name].append(wall)
            _, timing = await fn(bootstrap, groups, rate, batch)
            latencies = timing.latencies_ms()
            lat[name] += latencies
            scoring += timing.scoring_ms()
            print(f"  round {r + 1} {name:<10}: backlog {n / wall:7.0f} episodes/s; paced p50 "
                  f"{pct(latencies, 0.5):6.1f} ms, p99 {pct(latencies, 0.99):6.1f} ms")  # fmt: skip
    rate_of = {k: n / statistics.median(v) for k, v in walls.items()}
    for name in walls:
        ms = sorted(lat[name])
        print(f"{name:<10}: {rate_of[name]:7.0f} episodes/s (median of {rounds}); outcome → group ready "
              f"p50 {pct(ms, 0.5):.1f} ms, p99 {pct(ms, 0.99):.1f} ms, max {ms[-1]:.1f} ms")  # fmt: skip
    scoring.sort()
    print(f"cua-stream, of which outcome → its group's last score read (the scorer, its transaction, read "
          f"committed): p50 {pct(scoring, 0.5):.1f} ms, p99 {pct(scoring, 0.99):.1f} ms")  # fmt: skip
    ratio = rate_of["cua-stream"] / rate_of["raw"]
    p99 = pct(sorted(lat["cua-stream"]), 0.99)
    print(f"cua-stream / raw throughput: {ratio:.2f} (goal >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'})")
    print(f"cua-stream p99 latency: {p99:.1f} ms (goal < 100 ms: {'met' if p99 < 100 else 'NOT met'})")


async def curve(
    bootstrap: str, rates: list[float], seconds: float, group_size: int, turns: int, warmup: int, batch: int
) -> None:
    """Offered load against what each path keeps up with, rate by rate, to cua-stream's knee."""
    freeze_startup_heap()
    for _ in range(warmup):  # the broker's JVM warms up on backlogs first (see ``main``)
        for fn in (cua_round, raw_round):
            await fn(bootstrap, episodes(100, group_size, turns), 0.0, batch)
    print(f"curve: {group_size} episodes x {turns} turns a group, {seconds:g} s of groups at each rate;")
    print("offered eps/s | kept up, eps/s (cua / raw) | ready p50 / p99 ms (cua) | (raw) | scorer p50 / p99 ms"
          " | CPU s / 1000 episodes (cua / raw)")  # fmt: skip
    first_p99 = None
    for i, rate in enumerate(rates):
        groups = episodes(max(20, int(rate * seconds)), group_size, turns)
        n = len(groups) * group_size
        got: dict[str, tuple[float, Timing, float]] = {}
        for name, fn in (("cua", cua_round), ("raw", raw_round))[:: 1 if i % 2 == 0 else -1]:
            cpu = time.process_time()
            wall, timing = await fn(bootstrap, groups, rate, batch)
            got[name] = (n / wall, timing, (time.process_time() - cpu) / n * 1000)
        cua_ms, raw_ms = got["cua"][1].latencies_ms(), got["raw"][1].latencies_ms()
        scoring = got["cua"][1].scoring_ms()
        first_p99 = first_p99 or pct(cua_ms, 0.99)
        print(f"{rate * group_size:13.0f} | {got['cua'][0]:9.0f} / {got['raw'][0]:<9.0f}     | "
              f"{pct(cua_ms, 0.5):7.1f} / {pct(cua_ms, 0.99):<8.1f}       | {pct(raw_ms, 0.5):6.1f} / "
              f"{pct(raw_ms, 0.99):<7.1f} | {pct(scoring, 0.5):6.1f} / {pct(scoring, 0.99):<7.1f}    | "
              f"{got['cua'][2]:5.2f} / {got['raw'][2]:.2f} ({got['cua'][2] / got['raw'][2]:.2f}x)")  # fmt: skip
        if past_knee(got["cua"][0], rate * group_size, pct(cua_ms, 0.99), first_p99):
            print(f"knee: {rate * group_size:.0f} episodes/s offered, {got['cua'][0]:.0f} kept up with")
            return
    print("no knee up to the last rate")


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a fresh topic's leader elections, retried
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20.0, help="Groups per second in the latency measure.")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="Uncounted backlog rounds of each path first.")
    ap.add_argument(
        "--batch",
        type=int,
        default=ScorerConfig().max_batch,
        help="Outcomes per scorer transaction (and per relay commit) at most: scorer.max_batch.",
    )
    ap.add_argument(
        "--curve", type=float, nargs="+", help="Offered rates (groups/s): the curve, not the ratio."
    )
    ap.add_argument(
        "--seconds", type=float, default=5.0, help="With --curve: seconds of groups at each rate."
    )
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    a = ap.parse_args()
    args = (a.groups, a.group_size, a.turns, a.rate, a.rounds, a.warmup, a.batch)

    def run(bootstrap: str) -> None:
        if a.curve:
            asyncio.run(curve(bootstrap, a.curve, a.seconds, a.group_size, a.turns, a.warmup, a.batch))
        else:
            asyncio.run(main(bootstrap, *args))

    with bootstrap_or_private(a.bootstrap, 39194) as bootstrap:
        run(bootstrap)
