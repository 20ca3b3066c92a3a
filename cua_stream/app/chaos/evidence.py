"""Reading a chaos run's records back from its topics (``read_committed``), undecodable ones noted, and
scanning everything the run left (records, daemon logs, trial and checkpoint files, metrics pages) for
session keys."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

from cua_stream.app.chaos.invariants import RunLog
from cua_stream.auth import session_keys_in
from cua_stream.bus.consumer import decode_message
from cua_stream.bus.reader import read_raw
from cua_stream.config import BusConfig
from cua_stream.errors import RecordError
from cua_stream.events import GroupDropped, TrainStep
from cua_stream.topics import DLQ, OUTCOMES, POLICY, SCORES, SUMMARIES, TRAIN_STEPS, TURNS, WORK, TopicSpec

READ = (WORK, TURNS, SUMMARIES, OUTCOMES, SCORES, TRAIN_STEPS, POLICY, DLQ)
KEPT = frozenset({WORK, OUTCOMES, SCORES, TRAIN_STEPS, POLICY, DLQ})
"""The records the invariants read; the calls (turns, summaries) are only scanned (keys, decoding)."""


async def read_run(
    bus: BusConfig,
    run_id: str,
    *,
    files: Iterable[Path] = (),
    pages: Mapping[str, bytes] | None = None,
    exposure: Iterable[str] = (),
) -> RunLog:
    """Every committed record of the run's topics (the run's own prefix: everything there is the run's)."""
    names = bus.topics()
    by_spec: dict[TopicSpec, list[object]] = {spec: [] for spec in READ}
    undecodable: list[tuple[str, int, int]] = []
    leaks: list[str] = []
    scanned = 0
    for spec in READ:
        name = names.name_of(spec)
        async for msg in read_raw(bus, name):
            scanned += 1
            raw = b"".join([msg.key or b"", msg.value or b"", *(v or b"" for _, v in msg.headers or ())])
            if session_keys_in(raw):
                leaks.append(f"{name}[{msg.partition}]@{msg.offset}")
            try:
                event = decode_message({name: spec}, msg).event
            except RecordError:
                undecodable.append((name, msg.partition, msg.offset))
                continue
            if spec in KEPT and (getattr(event, "run_id", run_id) == run_id or spec is DLQ):
                by_spec[spec].append(event)
    for path in files:
        scanned += 1
        if session_keys_in(path.read_bytes()):
            leaks.append(str(path))
    for where, page in (pages or {}).items():
        scanned += 1
        if session_keys_in(page):
            leaks.append(where)
    return RunLog(
        work=by_spec[WORK],  # type: ignore[arg-type]
        outcomes=by_spec[OUTCOMES],  # type: ignore[arg-type]
        scores=by_spec[SCORES],  # type: ignore[arg-type]
        steps=[e for e in by_spec[TRAIN_STEPS] if isinstance(e, TrainStep)],
        drops=[e for e in by_spec[TRAIN_STEPS] if isinstance(e, GroupDropped)],
        policy=by_spec[POLICY],  # type: ignore[arg-type]
        dead_letters=by_spec[DLQ],  # type: ignore[arg-type]
        undecodable=undecodable,
        secrets_scanned=scanned,
        secrets_found=leaks,
        exposure=list(exposure),
    )


WEIGHTS = frozenset({".safetensors", ".pt", ".bin"})


def files_under(*roots: Path) -> list[Path]:
    """The files to scan under ``roots``: all but model weights and optimizer state (tensors only)."""
    return [
        p
        for root in roots
        if root.exists()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix not in WEIGHTS
    ]


def listeners(ports: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this host on ``ports`` (from /proc/net)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            found += listening(Path(table).read_text(), ports)
    return found


def listening(table: str, ports: set[int]) -> list[tuple[str, int]]:
    """The LISTEN sockets on ``ports`` in a /proc/net/tcp or tcp6 table. Pure."""
    out = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":  # 0A: TCP_LISTEN
            continue
        hex_addr, hex_port = fields[1].split(":")
        if (port := int(hex_port, 16)) in ports:
            out.append((_address(hex_addr), port))
    return out


def _address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:  # IPv4, in host (little-endian) order
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))  # IPv6: four little-endian words
    mapped = ipaddress.IPv6Address(words)
    return str(mapped.ipv4_mapped or mapped)
