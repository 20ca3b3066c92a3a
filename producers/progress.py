"""The producer's live progress table (rich, on stderr): what is running, what finished and how."""

from __future__ import annotations

import time
from collections.abc import Sized
from typing import Protocol

import anyio
from rich.console import Console
from rich.live import Live
from rich.table import Table

from producers.config import ProducerConfig
from producers.metrics import ProducerMetrics


class Producer(Protocol):
    """What the table reads of a running producer (the daemon's ``Producer`` is one)."""

    config: ProducerConfig
    metrics: ProducerMetrics
    running: int
    in_hand: Sized
    published: int


def progress_table(producer: Producer, elapsed_s: float, turns_per_s: float) -> Table:
    m = producer.metrics
    table = Table(title=f"producer {producer.config.group} · {elapsed_s:,.0f} s", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    table.add_row("running / in hand", f"{producer.running} / {len(producer.in_hand)}")
    table.add_row("outcomes published", str(producer.published))
    for key, n in sorted(m.tally.items()):
        table.add_row(f"  {key}", str(n))
    table.add_row("turns/s (last interval)", f"{turns_per_s:.2f}")
    if m.env_starts:
        table.add_row(
            "environment start (mean of last 100)", f"{sum(m.env_starts) / len(m.env_starts):.2f} s"
        )
    return table


async def show_progress(producer: Producer, every_s: float = 1.0) -> None:
    """Redraw the table every ``every_s`` until cancelled."""
    started = last_t = time.monotonic()
    last_turns = 0
    with Live(console=Console(stderr=True), refresh_per_second=4) as live:
        while True:
            await anyio.sleep(every_s)
            now = time.monotonic()
            rate = (producer.metrics.total_turns - last_turns) / max(now - last_t, 1e-9)
            last_t, last_turns = now, producer.metrics.total_turns
            live.update(progress_table(producer, now - started, rate))
