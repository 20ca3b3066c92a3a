"""Bus throughput: cua-stream's encode → produce → consume → decode path against raw aiokafka moving the
same bytes, measured side by side in one run (rounds alternate, medians compared).

    .venv/bin/python bench/bus_throughput.py [--events 4000] [--rounds 3] [--bootstrap host:port]

Without --bootstrap (or CUA_BOOTSTRAP_SERVERS) it starts a private local broker for the run. Each event is
a realistic turn: 2,000 completion token ids with their logprobs, a 200-token prompt delta and one image
reference. Goal: cua-stream / raw >= 0.8.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

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


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # transient leader-election retries are noise here
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    args = ap.parse_args()
    if args.bootstrap:
        asyncio.run(main(args.bootstrap, args.events, args.rounds))
    else:
        from cua_stream.broker import BrokerConfig, LocalBroker

        with tempfile.TemporaryDirectory() as home:
            broker = LocalBroker(BrokerConfig(home=home, port=39092, heap_mb=1024))
            broker.start()
            try:
                asyncio.run(main(broker.config.bootstrap_servers, args.events, args.rounds))
            finally:
                broker.stop()
