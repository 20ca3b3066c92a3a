"""A tiny Prometheus registry: labelled counters and gauges, rendered as the text exposition format,
and an optional ``/metrics`` endpoint. Enough for a daemon to be scraped; no client library needed."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from cua_stream.errors import ConfigError

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metric:
    """One metric family: a name, a help line, label names, and a value per label combination."""

    kind: Literal["counter", "gauge"]

    def __init__(self, name: str, help: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.help = help
        self.labels = labels
        self._values: dict[LabelValues, float] = {}

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name}: expected labels {self.labels}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labels)

    def value(self, **labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def samples(self) -> dict[LabelValues, float]:
        return dict(self._values)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for key, value in sorted(self._values.items()):
            pairs = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(self.labels, key, strict=True))
            lines.append(f"{self.name}{{{pairs}}} {value:g}" if pairs else f"{self.name} {value:g}")
        if not self._values and not self.labels:
            lines.append(f"{self.name} 0")
        return lines


class Counter(Metric):
    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter only goes up (got {amount})")
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(Metric):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        self._values[self._key(labels)] = value

    def replace(self, samples: dict[LabelValues, float]) -> None:
        """All of the family's samples at once (label values in ``labels`` order): a combination left
        out leaves the page (a partition no longer read)."""
        for key in samples:
            if len(key) != len(self.labels):
                raise ValueError(f"{self.name}: expected labels {self.labels}, got {key}")
        self._values = dict(samples)


class Registry:
    """The metrics of one process, rendered in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def _add[M: Metric](self, metric: M) -> M:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name!r} registered twice")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help: str, labels: tuple[str, ...] = ()) -> Counter:
        return self._add(Counter(name, help, labels))

    def gauge(self, name: str, help: str, labels: tuple[str, ...] = ()) -> Gauge:
        return self._add(Gauge(name, help, labels))

    def render(self) -> str:
        return "".join(line + "\n" for m in self._metrics.values() for line in m.render())


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of ``ordered`` (sorted ascending) by nearest rank; 0 for none."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class LoopLag:
    """How late the event loop runs: a ticker that should wake every ``tick_s`` records how late it
    woke; the page shows the worst of the last ``window`` ticks. A loop blocked by CPU-bound work, a
    synchronous call or a flood of tasks shows here before it shows anywhere else."""

    NAME = "cua_event_loop_lag_seconds"

    def __init__(self, tick_s: float = 0.1, window: int = 100) -> None:
        self.tick_s = tick_s
        self.recent: deque[float] = deque(maxlen=window)

    async def run(self) -> None:
        while True:
            start = anyio.current_time()
            await anyio.sleep(self.tick_s)
            self.recent.append(max(0.0, anyio.current_time() - start - self.tick_s))

    def render(self) -> str:
        worst = max(self.recent, default=0.0)
        return (
            f"# HELP {self.NAME} How late the event loop woke a {self.tick_s:g} s ticker: the worst of "
            f"the last {self.recent.maxlen} ticks.\n# TYPE {self.NAME} gauge\n{self.NAME} {worst:.6f}\n"
        )


RESIDENT_MEMORY = "cua_process_resident_memory_bytes"


def resident_memory() -> str:
    """The process's resident memory as Prometheus text (Linux: ``/proc/self/statm``; elsewhere none)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return ""
    return (
        f"# HELP {RESIDENT_MEMORY} Resident memory of the process.\n# TYPE {RESIDENT_MEMORY} gauge\n"
        f"{RESIDENT_MEMORY} {pages * os.sysconf('SC_PAGE_SIZE')}\n"
    )


async def serve_metrics(
    render: Callable[[], str],
    host: str,
    port: int,
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer every HTTP request with ``render()`` as Prometheus text, the event loop's lag (the
    daemon's own loop: this runs in it) and the process's resident memory; reports the bound port."""
    lag = LoopLag()

    async def answer(stream: SocketStream) -> None:
        async with stream:
            with anyio.move_on_after(5):  # a client that never finishes its request gets nothing
                request = b""
                try:
                    while b"\r\n\r\n" not in request and len(request) < 65536:
                        request += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                body = (render() + lag.render() + resident_memory()).encode()
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                await stream.send(head.encode() + body)

    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as e:
        raise ConfigError(f"metrics_port: cannot listen on {host}:{port} ({e.strerror or e})") from None
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(lag.run)
        task_status.started(listener.extra(SocketAttribute.local_port))
        await listener.serve(answer)
