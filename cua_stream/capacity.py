"""The capacity model: what a deployment of many GPUs needs around its engines (gateways, producer
processes, partitions, brokers, object-store bandwidth), computed from measured per-core costs and stated
assumptions. ``cua-stream plan`` prints it; docs/capacity.md explains it.

Pure: ``plan`` takes a ``Deployment`` and ``PerCoreCosts`` and returns its lines, each with the formula it
came from written out with the numbers, so a reader can check every figure by hand. Every assumption is
a named constant below with where it comes from; the measured costs are ``MEASURED`` (the output of
``bench/stream_load.py``, committed as ``bench/costs.json``, which a unit test holds equal to it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import msgspec

DEFAULT_TURN_S = 4.0
"""Seconds one episode takes per turn, all in: the engine's generation (about 1.2 s for a 240-token reply
at a batch of tens, by ``bench/fixtures/latency_model.py``) plus the action and the next screenshot on the
desktop (assumed 2-3 s). An assumption: measure it on a real desktop fleet (``bench/producer_desktops.py``)."""
CORE_BUDGET = 0.5
"""The share of a core each gateway is planned to use: half, headroom for bursts and longer histories (an
assumption: the curve measured on a shared 2-core machine could not show where a dedicated core kneels)."""
GATEWAY_MEMORY_MB = 16_384
"""Memory a gateway host gives the gateway process (an assumption: a 32 GB host, half of it)."""
EPISODES_PER_PRODUCER = 512
"""Episodes in flight per producer process: the concurrency ``bench/producer_scale.py`` holds its loop-lag
goal at (p99 < 50 ms at 512)."""
TURN_RECORD_KB = 4.0
"""One turn record on the bus: a ~300-token prompt delta and a ~200-token completion (4-byte ids and
4-byte logprobs), image references and the envelope (the bus benchmark's 2,000-token records are ~25 kB)."""
PARTITION_MB_S = 10.0
"""Write throughput one partition of the turn topic is planned for (a common Kafka planning figure, well
below a broker's disk; an assumption, not measured here)."""
PARTITION_EVENTS_PER_S = 5_000.0
"""Turn events one partition's consumer (the trainer's join) keeps up with: the trainer-join benchmark's
goal (docs/benchmarks.md). Measured on a loaded 2-core machine: 6,749/s joined from a backlog; live, with
the writer in the same process, the curve kneed at 4,000/s offered. Not yet measured on a dedicated core."""
BROKER_MB_S = 100.0
"""Replicated write throughput one broker is planned for (an assumption: a modest NVMe broker)."""
REPLICATION = 3
"""Copies of each partition (the usual production replication factor)."""
MIN_BROKERS = 3
"""Fewest brokers for a replication factor of 3 with one broker down."""
BASE64_GROWTH = 4 / 3
"""A screenshot in a request body is base64: 4 bytes for every 3."""


class PerCoreCosts(msgspec.Struct, frozen=True, kw_only=True):
    """What one core of a stage costs, as ``bench/stream_load.py --costs-out`` writes it."""

    gateway_cpu_s_per_1000_turns: float
    """Gateway CPU seconds per 1,000 turns, at the request body size ``at_body_kb``."""
    gateway_mb_per_session: float
    """Gateway memory per session in flight (above the idle gateway), at ``at_body_kb``."""
    at_body_kb: float
    """The mean request body (KB) of the measured point: both costs grow with it."""
    measured_by: str = ""
    measured_at: str = ""
    machine: str = ""
    at_sessions: int = 0
    at_turns_per_s: float = 0.0

    def __post_init__(self) -> None:
        if min(self.gateway_cpu_s_per_1000_turns, self.gateway_mb_per_session, self.at_body_kb) <= 0:
            raise ValueError("per-core costs: every cost and the body size must be > 0")


MEASURED = PerCoreCosts(
    gateway_cpu_s_per_1000_turns=16.786,
    gateway_mb_per_session=16.267,
    at_body_kb=1655,
    measured_by="python bench/stream_load.py --sessions 1 4 16 64 256 --seconds 4 --warmup 2 --speedup 20 --costs-out bench/costs.json",
    measured_at="2026-12-06",
    machine="2 cores, shared with other work: noisy",
    at_sessions=4,
    at_turns_per_s=6.92,
)
"""The committed measurement (``bench/costs.json``): the defaults of ``cua-stream plan``."""


@dataclass(frozen=True)
class Deployment:
    """What is being planned for."""

    gpus: int
    episodes_per_gpu: int = 16
    """Episodes in flight per GPU (each GPU one engine)."""
    turns_per_episode: int = 30
    """Turns per episode (``--turns``)."""
    screenshot_kb: float = 150.0
    """One screenshot's size (KB, as stored)."""
    turn_s: float = DEFAULT_TURN_S
    """Seconds per turn, generation and action (``DEFAULT_TURN_S`` says what it assumes)."""

    def __post_init__(self) -> None:
        for name in (f.name for f in fields(self)):  # every input is a positive number
            if not getattr(self, name) > 0:
                raise ValueError(f"{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Line:
    name: str
    value: float
    unit: str
    formula: str
    """How the value was computed, with the numbers."""


def mean_body_kb(d: Deployment) -> float:
    """The mean request body over an episode: turn k carries k screenshots, base64 (text is small)."""
    return d.screenshot_kb * BASE64_GROWTH * (d.turns_per_episode + 1) / 2


def body_scale(body_kb: float, costs: PerCoreCosts) -> float:
    """How much more a turn of ``body_kb`` costs the gateway than the measured point's: in proportion to
    the body past it, never less (conservative: part of the cost is per turn whatever the body)."""
    return max(1.0, body_kb / costs.at_body_kb)


def gateway_cores(turns_s: float, body_kb: float, costs: PerCoreCosts) -> float:
    """Gateway cores busy at ``turns_s`` turns a second of ``body_kb`` request bodies."""
    return turns_s * costs.gateway_cpu_s_per_1000_turns / 1000 * body_scale(body_kb, costs)


def plan(d: Deployment, costs: PerCoreCosts = MEASURED) -> tuple[Line, ...]:
    """The deployment's needs, line by line (gateway costs scaled by ``body_scale``)."""
    episodes = d.gpus * d.episodes_per_gpu
    turns_s = episodes / d.turn_s
    body = mean_body_kb(d)
    scale = body_scale(body, costs)
    cpu_turn = costs.gateway_cpu_s_per_1000_turns / 1000 * scale
    cores = gateway_cores(turns_s, body, costs)
    mb_session = costs.gateway_mb_per_session * scale
    by_cpu = math.ceil(cores / CORE_BUDGET)
    by_memory = math.ceil(episodes * mb_session / GATEWAY_MEMORY_MB)
    gateways = max(1, by_cpu, by_memory)
    bus = turns_s * TURN_RECORD_KB / 1024
    by_bytes = math.ceil(bus / PARTITION_MB_S)
    by_events = math.ceil(turns_s / PARTITION_EVENTS_PER_S)
    partitions = max(1, by_bytes, by_events)
    brokers = max(MIN_BROKERS, math.ceil(bus * REPLICATION / BROKER_MB_S))
    write = turns_s * d.screenshot_kb / 1024
    return (
        Line("episodes in flight", episodes, "", f"{d.gpus} GPUs x {d.episodes_per_gpu} episodes"),
        Line("turns/s", turns_s, "/s", f"{episodes} episodes / {d.turn_s:g} s per turn"),
        Line("mean request body", body, "KB",
             f"{d.screenshot_kb:g} KB x {BASE64_GROWTH:.3g} (base64) x ({d.turns_per_episode} turns + 1) / 2"),
        Line("gateway CPU per turn", cpu_turn * 1e3, "ms",
             f"{costs.gateway_cpu_s_per_1000_turns:g} ms measured at {costs.at_body_kb:g} KB x {scale:.2f}"),
        Line("gateway cores", cores, "", f"{turns_s:.1f} turns/s x {cpu_turn * 1e3:.2f} ms"),
        Line("gateways", gateways, "",
             f"max(ceil({cores:.2f} cores / {CORE_BUDGET:g} a core) = {by_cpu}, "
             f"ceil({episodes} x {mb_session:.1f} MB / {GATEWAY_MEMORY_MB} MB) = {by_memory})"),
        Line("producer processes", math.ceil(episodes / EPISODES_PER_PRODUCER), "",
             f"ceil({episodes} episodes / {EPISODES_PER_PRODUCER} a process)"),
        Line("bus write", bus, "MB/s", f"{turns_s:.1f} turns/s x {TURN_RECORD_KB:g} KB a turn record"),
        Line("turn-topic partitions", partitions, "",
             f"max(ceil({bus:.2f} MB/s / {PARTITION_MB_S:g} MB/s) = {by_bytes}, "
             f"ceil({turns_s:.1f} events/s / {PARTITION_EVENTS_PER_S:g} a partition) = {by_events})"),
        Line("brokers", brokers, "",
             f"max({MIN_BROKERS}, ceil({bus:.2f} MB/s x {REPLICATION} copies / {BROKER_MB_S:g} MB/s))"),
        Line("object-store write", write, "MB/s", f"{turns_s:.1f} turns/s x {d.screenshot_kb:g} KB"),
        Line("object-store read", write, "MB/s", "the trainer reads each screenshot once"),
    )  # fmt: skip


def render(lines: tuple[Line, ...], costs: PerCoreCosts) -> str:
    """The plan as a table, then where its measured costs came from."""
    width = max(len(line.name) for line in lines)
    rows = []
    for line in lines:
        value = (
            f"{line.value:,.0f}"
            if line.value >= 100 or line.value == int(line.value)
            else f"{line.value:.2f}"
        )
        rows.append(f"{line.name:<{width}}  {value:>10} {line.unit:<4}  {line.formula}")
    source = costs.measured_by or "given costs"
    when = f" on {costs.measured_at}" if costs.measured_at else ""
    machine = f" ({costs.machine})" if costs.machine else ""
    rows.append(f"\nmeasured costs: {source}{when}{machine}; assumptions: docs/capacity.md")
    return "\n".join(rows)


def load_costs(text: str) -> PerCoreCosts:
    """Per-core costs from the JSON ``bench/stream_load.py --costs-out`` writes (unknown keys ignored)."""
    try:
        return msgspec.json.decode(text, type=PerCoreCosts)
    except msgspec.ValidationError as e:
        raise ValueError(f"per-core costs: {e}") from None
    except msgspec.DecodeError as e:
        raise ValueError(f"per-core costs: not JSON ({e})") from None
