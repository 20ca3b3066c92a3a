"""What a run's daemons use while it runs, sampled every few seconds: each one's resident memory (from
/proc), its event loop's lag (from its metrics page) and the consumer groups' lag (from the broker);
then plotted to a PNG. A sample that cannot be taken (the daemon or the broker is down) is skipped."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from cua_stream.app.chaos.daemons import Daemon
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.consumer import make_kafka_consumer, partitions_of, start_consumer, stop_consumer
from cua_stream.config import BusConfig
from cua_stream.metrics import LoopLag
from cua_stream.topics import OUTCOMES, WORK, TopicSpec


@dataclass(frozen=True)
class Point:
    t_s: float
    series: str
    """``rss:<daemon>`` (MB), ``loop:<daemon>`` (seconds), ``lag:<group>`` (records)."""
    value: float


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def loop_lag(page: str) -> float | None:
    for line in page.splitlines():
        if line.startswith(LoopLag.NAME + " "):
            return float(line.split()[1])
    return None


class Sampler:
    def __init__(
        self, bus: BusConfig, daemons: dict[str, Daemon], broker_pid: Callable[[], int | None]
    ) -> None:
        self.bus, self.daemons, self.broker_pid = bus, daemons, broker_pid
        self.points: list[Point] = []
        self.groups: dict[str, TopicSpec] = {
            f"{bus.topic_prefix}.producers": WORK,
            f"{bus.topic_prefix}.scorer": OUTCOMES,
        }

    async def run(self, every_s: float, t0: float) -> None:
        async with httpx.AsyncClient(timeout=2) as http:
            while True:
                t = time.monotonic() - t0
                await self._memory_and_loops(http, t)
                with contextlib.suppress(KafkaError, OSError, TimeoutError):
                    with anyio.fail_after(every_s):
                        await self._group_lag(t)
                await anyio.sleep(every_s)

    async def _memory_and_loops(self, http: httpx.AsyncClient, t: float) -> None:
        pids = {n: d.proc.pid for n, d in self.daemons.items() if d.proc is not None and d.exited() is None}
        if (broker := self.broker_pid()) is not None:
            pids["broker"] = broker
        for name, pid in pids.items():
            if (mb := rss_mb(pid)) is not None:
                self.points.append(Point(t, f"rss:{name}", mb))
        for name, d in self.daemons.items():
            if d.metrics_url and not d.held:
                with contextlib.suppress(httpx.HTTPError):
                    if (lag := loop_lag((await http.get(d.metrics_url)).text)) is not None:
                        self.points.append(Point(t, f"loop:{name}", lag))

    async def _group_lag(self, t: float) -> None:
        # Fresh clients per sample (two short connections every few seconds): the broker restarts under
        # chaos, and a sample that times out while it is down must leave nothing half-started behind.
        names = self.bus.topics()
        consumer = make_kafka_consumer(self.bus, group_id=None)
        try:
            await start_consumer(consumer, self.bus)
            async with TopicAdmin(self.bus) as admin:
                for group, spec in self.groups.items():
                    topic = names.name_of(spec)
                    committed = await admin.committed(group)
                    parts = await partitions_of(consumer, topic)
                    ends = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
                    lag = sum(end - committed.get((tp.topic, tp.partition), 0) for tp, end in ends.items())
                    self.points.append(Point(t, f"lag:{group.rsplit('.', 1)[-1]}", float(lag)))
        finally:  # also when the broker is down and the sample timed out while starting
            await stop_consumer(consumer)


def plot(points: list[Point], path: Path, title: str) -> None:
    """Three panels over time: memory per daemon, event-loop lag per daemon, consumer-group lag."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    for ax, kind, label in zip(
        axes, ("rss", "loop", "lag"), ("resident memory (MB)", "event-loop lag (s, worst of 10 s)",
                                       "consumer-group lag (records)"), strict=True
    ):  # fmt: skip
        series = sorted({p.series for p in points if p.series.startswith(kind + ":")})
        for s in series:
            xs = [p.t_s / 60 for p in points if p.series == s]
            ys = [p.value for p in points if p.series == s]
            ax.plot(xs, ys, label=s.split(":", 1)[1], linewidth=1.2)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(loc="upper left", fontsize=8, ncol=4)
    axes[-1].set_xlabel("minutes")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
