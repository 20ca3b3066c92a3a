"""Replay and tap against a real broker, through the real `cua-stream` command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import read_raw
from cua_stream.config import BusConfig
from cua_stream.events import CallKind, Discard, Logprobs, Reward, ScoreEvent, TokenIds, TurnEvent, decode
from cua_stream.replay import read_file, read_header
from cua_stream.topics import ALL, SCORES
from cua_stream.topics import TURNS as TURNS_SPEC

pytestmark = [pytest.mark.kafka]


def turn(i: int) -> TurnEvent:
    return TurnEvent(
        run_id="run-r",
        group_id=f"g{i % 3}",
        episode_id=f"ep-{i}",
        seq=i,
        call_id=f"c{i}",
        kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds(range(50)),
        completion_ids=TokenIds([1, 2, 3]),
        completion_logprobs=Logprobs([-1.0, -2.0, -3.0]),
        policy_version=1,
        finish_reason="stop",
        started_at=1.0,
    )


def cli(bus: BusConfig, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cua_stream", *args, "--bootstrap", bus.bootstrap_servers]
    if "--prefix" not in args:
        cmd += ["--prefix", bus.topic_prefix]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


async def _publish_mixed(bus: BusConfig) -> None:
    """12 turns with one undecodable record in the middle of partition 0."""
    async with EventProducer(bus) as producer:
        for i in range(6):
            await producer.publish(TURNS_SPEC, turn(i))
        raw = AIOKafkaProducer(bootstrap_servers=bus.bootstrap_servers)
        await raw.start()
        await raw.send_and_wait(bus.topics().name_of(TURNS_SPEC), b"\xc1garbage", key=b"g0", partition=0)
        await raw.stop()
        for i in range(6, 12):
            await producer.publish(TURNS_SPEC, turn(i))


async def _raw(bus: BusConfig, topic: str) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    return [(m.partition, m.offset, m.key, m.value, list(m.headers)) async for m in read_raw(bus, topic)]


@pytest.mark.anyio
async def test_replay_range_to_files_and_new_prefix(bus_config: BusConfig, tmp_path: Path) -> None:
    await _publish_mixed(bus_config)
    source = await _raw(bus_config, bus_config.topics().name_of(TURNS_SPEC))
    assert len(source) == 13

    for name in ("range.jsonl", "range.msgpack"):
        res = cli(bus_config, "replay", "--topic", "turns", "--out", str(tmp_path / name))
        assert res.returncode == 0, res.stderr
        assert "replayed 13 record(s)" in res.stdout
        back = [(r.partition, r.offset, r.key, r.value, r.headers) for r in read_file(tmp_path / name)]
        assert sorted(back) == sorted(source)
    header, *lines = [json.loads(x) for x in (tmp_path / "range.jsonl").read_text().splitlines()]
    assert header["format"] == "cua-stream-replay/1" and header["schema"] == "cua-stream/1"
    assert header["topic"] == bus_config.topics().name_of(TURNS_SPEC)
    packed = read_header(tmp_path / "range.msgpack")
    assert packed is not None and (packed.format, packed.schema, packed.topic) == (
        header["format"],
        header["schema"],
        header["topic"],
    )
    assert sum(1 for x in lines if x["event"] is None and "decode_error" in x) == 1
    assert {x["event"]["episode_id"] for x in lines if x["event"]} == {f"ep-{i}" for i in range(12)}

    # an offset sub-range of one partition
    res = cli(
        bus_config,
        "replay",
        "-t",
        "turns",
        "-p",
        "0",
        "--from",
        "1",
        "--to",
        "3",
        "-o",
        str(tmp_path / "p0.jsonl"),
    )
    assert res.returncode == 0, res.stderr
    assert [(r.partition, r.offset) for r in read_file(tmp_path / "p0.jsonl")] == [(0, 1), (0, 2)]

    # re-publish under a new prefix: same keys, values, headers, partitions and per-partition order
    new_prefix = bus_config.topic_prefix + "-replay"
    res = cli(bus_config, "replay", "--topic", "turns", "--republish-prefix", new_prefix)
    assert res.returncode == 0, res.stderr
    target = BusConfig(
        bootstrap_servers=bus_config.bootstrap_servers, topic_prefix=new_prefix, episode_partitions=2
    )
    copied = await _raw(target, target.topics().name_of(TURNS_SPEC))
    strip = lambda rows: sorted((p, o, k, v, h) for p, o, k, v, h in rows)  # noqa: E731
    assert strip(copied) == strip(source)


@pytest.mark.anyio
async def test_replay_by_time(bus_config: BusConfig, tmp_path: Path) -> None:
    async with EventProducer(bus_config) as producer:
        for i in range(3):
            await producer.publish(TURNS_SPEC, turn(i))
        await anyio.sleep(0.05)
        cut = int(time.time() * 1000)
        await anyio.sleep(0.05)
        for i in range(3, 6):
            await producer.publish(TURNS_SPEC, turn(i))
    res = cli(bus_config, "replay", "-t", "turns", "--from", f"@{cut}", "-o", str(tmp_path / "late.jsonl"))
    assert res.returncode == 0, res.stderr
    got = sorted(decode(r.value).seq for r in read_file(tmp_path / "late.jsonl"))
    assert got == [3, 4, 5]


@pytest.mark.anyio
async def test_tap_prints_events_one_line_each(bus_config: BusConfig) -> None:
    await _publish_mixed(bus_config)
    async with EventProducer(bus_config) as producer:
        await producer.publish(
            SCORES,
            ScoreEvent(
                run_id="run-r",
                group_id="g1",
                episode_id="ep-1",
                verdict=Reward(value=0.5),
                policy_version=1,
                scored_at=0,
            ),
        )
        await producer.publish(
            SCORES,
            ScoreEvent(
                run_id="run-r",
                group_id="g2",
                episode_id="ep-2",
                verdict=Discard(reason="sandbox_lost"),
                policy_version=1,
                scored_at=0,
            ),
        )
    res = cli(bus_config, "tap", "turns", "scores", "--from-beginning", "--count", "15")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 15
    assert sum(" turn ep=" in x for x in lines) == 12
    assert sum("!undecodable" in x for x in lines) == 1
    assert any("score ep=ep-1 reward=0.5 (ok)" in x for x in lines)
    assert any("score ep=ep-2 DISCARD sandbox_lost" in x for x in lines)

    res = cli(
        bus_config,
        "tap",
        "--from-beginning",
        "--json",
        "-f",
        "type=score",
        "-f",
        "episode_id=ep-2",
        "--idle-timeout",
        "10",  # counted from the reader's start: the first fetch may be slow on a loaded machine
    )
    assert res.returncode == 0, res.stderr
    docs = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(docs) == 1 and docs[0]["event"]["verdict"] == {"verdict": "discard", "reason": "sandbox_lost"}


def test_topics_create_is_idempotent_and_describe_matches_the_registry(kafka_bootstrap: str) -> None:
    bus = BusConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=f"cli-{os.getpid()}-{time.time_ns()}")
    first = cli(bus, "topics", "create")
    assert first.returncode == 0 and f"created {len(ALL)} topic(s)" in first.stdout, first.stderr
    again = cli(bus, "topics", "create")
    assert again.returncode == 0 and "created 0 topic(s) (all existed)" in again.stdout
    described = cli(bus, "topics", "describe")
    assert described.returncode == 0, described.stdout
    assert described.stdout.count("ok") == len(ALL) and "compact" in described.stdout
