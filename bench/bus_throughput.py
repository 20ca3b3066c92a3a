"""Bus throughput: cua-stream's encode → produce → consume → decode path against raw aiokafka moving the
same bytes, measured side by side in one run (rounds alternate, medians compared).

    .venv/bin/python bench/bus_throughput.py [--events 4000] [--rounds 3] [--bootstrap host:port]
    .venv/bin/python bench/bus_throughput.py --curve 100 200 400 800 1600 [--seconds 4]

Without --bootstrap (or CUA_BOOTSTRAP_SERVERS) it starts a private local broker for the run. Each event is
a realistic turn: 2,000 completion token ids with their logprobs, a 200-token prompt delta and one image
reference. Goal: cua-stream / raw >= 0.8.

``--curve R1 R2 ...`` (turn events/s): instead, the bus's curve. At each offered rate, both paths side by
side (alternating which goes first), ``--seconds`` of turns written paced while a consumer in the same
process reads them live: MB/s kept up with (the bytes / from the first sent to the last read), send → read
latency p50/p99, and this process's CPU seconds per MB (it writes and reads). The rates rise until
cua-stream's knee (kept up with < 90 % of the offered rate, or a p99 10x the first point's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.fixtures.broker import bootstrap_or_private
from bench.fixtures.curve import due, past_knee, pct
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.codec import encode_record
from cua_stream.bus.connect import client_security
from cua_stream.bus.consumer import decode_message, partitions_of, start_consumer
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import CallKind, ImageRef, Logprobs, TokenIds, TurnEvent, decode
from cua_stream.topics import TURNS

PRODUCER_OPTS = {"enable_idempotence": True, "acks": "all", "linger_ms": 5, "max_batch_size": 512 * 1024,
                 "max_request_size": 8 * 1024 * 1024}  # fmt: skip


def make_turns(n: int) -> list[TurnEvent]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        out.append(
            TurnEvent(
                run_id="bench",
                group_id=f"g{i % 64}",
                episode_id=f"e{i % 512}",
                seq=i,
                call_id=uuid.UUID(int=i).hex,
                parent_call_id=uuid.UUID(int=i + 1).hex,
                kind=CallKind.AGENT_TURN,
                prompt_ids=TokenIds(rng.randrange(151_000) for _ in range(200)),
                completion_ids=TokenIds(rng.randrange(151_000) for _ in range(2000)),
                completion_logprobs=Logprobs(-rng.random() * 3 for _ in range(2000)),
                images=(
                    ImageRef(sha256=f"{i:064x}", size=48_000, width=1280, height=720, grid_thw=(1, 22, 40)),
                ),
                policy_version=7,
                finish_reason="stop",
                sampling={"temperature": 1.0, "top_p": 1.0, "max_tokens": 2048},
                started_at=time.time(),
            )
        )
    return out


async def consume_all(bus: BusConfig, topic: str, n: int, *, decode: bool) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bus.bootstrap_servers, enable_auto_commit=False,
                                isolation_level="read_committed", max_poll_records=1000,
                                fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024,
                                **client_security(bus))  # fmt: skip
    await start_consumer(consumer, bus)
    try:
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        by_name = {topic: TURNS}
        got = 0
        while got < n:
            polled = await consumer.getmany(timeout_ms=1000)
            for msgs in polled.values():
                if decode:
                    for msg in msgs:
                        decode_message(by_name, msg)
                got += len(msgs)
    finally:
        await consumer.stop()


async def run_raw(bus: BusConfig, records: list[tuple[bytes, bytes, list]]) -> float:
    topic = bus.topics().name_of(TURNS)
    t0 = time.perf_counter()
    producer = AIOKafkaProducer(
        bootstrap_servers=bus.bootstrap_servers, **PRODUCER_OPTS, **client_security(bus)
    )
    await producer.start()
    futures = [await producer.send(topic, value, key=key, headers=headers) for key, value, headers in records]
    await asyncio.gather(*futures)
    await producer.stop()
    await consume_all(bus, topic, len(records), decode=False)
    return time.perf_counter() - t0


async def run_ours(bus: BusConfig, turns: list[TurnEvent]) -> float:
    t0 = time.perf_counter()
    async with EventProducer(bus) as producer:
        futures = [await producer.send(TURNS, ev) for ev in turns]
        await asyncio.gather(*futures)
    await consume_all(bus, bus.topics().name_of(TURNS), len(turns), decode=True)
    return time.perf_counter() - t0


async def fresh_prefix(bootstrap: str, tag: str) -> BusConfig:
    bus = BusConfig(
        bootstrap_servers=bootstrap, topic_prefix=f"bench-{tag}-{uuid.uuid4().hex[:8]}", episode_partitions=4
    )
    async with TopicAdmin(bus) as admin:
        await admin.create((TURNS,))
    return bus


async def main(bootstrap: str, n: int, rounds: int) -> None:
    turns = make_turns(n)
    records = [(r.key, r.value, r.headers) for r in (encode_record("x", TURNS, ev) for ev in turns)]
    mb = sum(len(v) for _, v, _ in records) / 1e6
    print(f"{n} turn events, {mb / n * 1e3:.1f} kB each, {mb:.1f} MB per pass, {rounds} rounds (alternating)")
    t0 = time.perf_counter()
    for ev in turns:
        encode_record("x", TURNS, ev)
    t1 = time.perf_counter()
    for _, value, _ in records:
        decode(value)
    t2 = time.perf_counter()
    print(
        f"codec alone: encode+headers {(t1 - t0) / n * 1e6:.1f} us/event, decode {(t2 - t1) / n * 1e6:.1f} us/event"
    )
    times: dict[str, list[float]] = {"raw aiokafka": [], "cua-stream": []}
    for r in range(rounds):
        for name in ("raw aiokafka", "cua-stream") if r % 2 == 0 else ("cua-stream", "raw aiokafka"):
            bus = await fresh_prefix(bootstrap, name.split()[0].replace("-", ""))
            t = await (run_raw(bus, records) if name == "raw aiokafka" else run_ours(bus, turns))
            times[name].append(t)
            print(f"  round {r + 1} {name:>12}: {t:6.2f} s  {n / t:8.0f} events/s  {mb / t:7.1f} MB/s")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, t in med.items():
        print(f"median {k:>12}: {n / t:8.0f} events/s  {mb / t:7.1f} MB/s")
    ratio = med["raw aiokafka"] / med["cua-stream"]
    print(
        f"ratio cua-stream / raw (throughput): {ratio:.2f}  (goal >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'})"
    )


async def live_point(bus: BusConfig, turns: list[TurnEvent], rate: float, ours: bool) -> dict[str, float]:
    """``turns`` written at ``rate`` a second while read live; what was kept up with."""
    topic = bus.topics().name_of(TURNS)
    records = [encode_record(topic, TURNS, ev) for ev in turns]
    sent: dict[int, float] = {}
    read: dict[int, float] = {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bus.bootstrap_servers, enable_auto_commit=False,
                                isolation_level="read_committed", max_poll_records=1000,
                                fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024,
                                **client_security(bus))  # fmt: skip
    await start_consumer(consumer, bus)
    tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    raw = None if ours else AIOKafkaProducer(bootstrap_servers=bus.bootstrap_servers, **PRODUCER_OPTS,
                                             **client_security(bus))  # fmt: skip
    cpu0 = time.process_time()

    async def write() -> None:
        async with contextlib.AsyncExitStack() as stack:
            producer = await stack.enter_async_context(EventProducer(bus)) if ours else raw
            if raw is not None:
                await raw.start()
                stack.push_async_callback(raw.stop)
            async for batch in due(len(turns), rate):
                for j in batch:
                    sent[j] = time.perf_counter()
                    if ours:
                        await producer.send(TURNS, turns[j])  # type: ignore[union-attr]
                    else:
                        rec = records[j]
                        headers = [*rec.headers, ("n", j.to_bytes(4, "big"))]  # which turn, for its latency
                        await raw.send(topic, rec.value, key=rec.key, headers=headers)  # type: ignore[union-attr]
            await producer.flush()  # type: ignore[union-attr]

    writing = asyncio.create_task(write())
    try:
        while len(read) < len(turns):
            for msgs in (await consumer.getmany(timeout_ms=200)).values():
                now = time.perf_counter()
                for msg in msgs:
                    if ours:  # cua-stream's reading: each record decoded and checked
                        seq = decode_message({topic: TURNS}, msg).event.seq  # type: ignore[union-attr]
                    else:  # raw's: the bytes, and the turn's number from its last header
                        seq = int.from_bytes(msg.headers[-1][1], "big")
                    read.setdefault(seq, now)
        await writing
    finally:
        await consumer.stop()
    cpu = time.process_time() - cpu0
    mb = sum(len(r.value) for r in records) / 1e6
    ms = [(read[j] - sent[j]) * 1000 for j in range(len(turns))]
    wall = max(read.values()) - sent[0]
    return {"mb_s": mb / wall, "p50": pct(ms, 0.5), "p99": pct(ms, 0.99), "cpu_per_mb": cpu / mb}


async def curve(bootstrap: str, rates: list[float], seconds: float) -> None:
    base = make_turns(1000)  # then copies with their own turn numbers: drawing 2,000 ids a turn is slow
    pool = [msgspec.structs.replace(base[j % 1000], seq=j) for j in range(int(max(rates) * seconds))]
    kb = sum(len(encode_record("x", TURNS, ev).value) for ev in pool[:100]) / 100 / 1e3
    print(f"curve: turn events of {kb:.1f} kB, {seconds:g} s of them at each rate, read live in this process")
    print("offered events/s (MB/s) | kept up MB/s (cua / raw) | send → read p50 / p99 ms (cua) | (raw) | "
          "CPU s / MB (cua / raw)")  # fmt: skip
    first_p99 = None
    for i, rate in enumerate(rates):
        turns = pool[: int(rate * seconds)]
        got = {}
        for name in ("cua", "raw")[:: 1 if i % 2 == 0 else -1]:
            bus = await fresh_prefix(bootstrap, f"curve{name}")
            got[name] = await live_point(bus, turns, rate, ours=name == "cua")
        c, r = got["cua"], got["raw"]
        first_p99 = first_p99 or c["p99"]
        print(f"{rate:10.0f} ({rate * kb / 1e3:6.1f})      | {c['mb_s']:6.1f} / {r['mb_s']:<6.1f}             | "
              f"{c['p50']:7.1f} / {c['p99']:<8.1f}              | {r['p50']:6.1f} / {r['p99']:<7.1f} | "
              f"{c['cpu_per_mb']:.3f} / {r['cpu_per_mb']:.3f} ({c['cpu_per_mb'] / r['cpu_per_mb']:.2f}x)")  # fmt: skip
        if past_knee(c["mb_s"], rate * kb / 1e3, c["p99"], first_p99):
            print(
                f"knee: {rate:.0f} events/s ({rate * kb / 1e3:.1f} MB/s) offered, {c['mb_s']:.1f} MB/s kept up with"
            )
            return
    print("no knee up to the last rate")


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # transient leader-election retries are noise here
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--curve", type=float, nargs="+", help="Offered turn events/s: the curve, not the ratio.")
    ap.add_argument("--seconds", type=float, default=4.0, help="With --curve: seconds of turns at each rate.")
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    args = ap.parse_args()

    def run(bootstrap: str) -> None:
        if args.curve:
            asyncio.run(curve(bootstrap, args.curve, args.seconds))
        else:
            asyncio.run(main(bootstrap, args.events, args.rounds))

    with bootstrap_or_private(args.bootstrap, 39092) as bootstrap:
        run(bootstrap)
