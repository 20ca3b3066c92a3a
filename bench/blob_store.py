"""The local blob store's curve: screenshots written (as the gateway stores each turn's) and read back (as
the trainer loads a sample's), by 1, 2, 4, ... writers at once, up to the knee.

    .venv/bin/python bench/blob_store.py [--writers 1 2 4 8 16] [--seconds 3] [--kb 150] [--dir DIR]

Each writer puts distinct screenshots back to back (``LocalBlobStore.put``: the sha256, a temporary file,
the rename), from its own thread, as the gateway's request handlers do off the event loop; then as many
readers get them back (``get``, the hash checked on read). Per point: MB/s written and read, put and get
latency p50/p99 (ms), and this process's CPU seconds per GB. The writers double until MB/s written rises
less than 10 % (the knee). ``--dir``: where the store is made (default: a temporary directory on the
disk the state directory is on; a tmpfs would measure memory). The S3 store is not measured here: the
only S3 server this machine can run is moto, a Python mock whose speed would be its own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fixtures.curve import pct
from cua_stream.blobs import LocalBlobStore


def run_threads(n: int, work: object) -> None:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]  # type: ignore[arg-type]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def point(root: Path, writers: int, seconds: float, size: int) -> dict[str, float]:
    store = LocalBlobStore(root / f"w{writers}")
    # distinct screenshots: a shared random block with each one's own number in front (the hash differs)
    block = os.urandom(size)
    put_ms: list[list[float]] = [[] for _ in range(writers)]
    names: list[list[str]] = [[] for _ in range(writers)]
    stop = time.perf_counter() + seconds

    def write(i: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            data = f"{i}-{n}-".encode() + block
            t = time.perf_counter()
            names[i].append(store.put(data))
            put_ms[i].append((time.perf_counter() - t) * 1000)
            n += 1

    cpu, wall = time.process_time(), time.perf_counter()
    run_threads(writers, write)
    wrote_s, wrote_cpu = time.perf_counter() - wall, time.process_time() - cpu
    get_ms: list[list[float]] = [[] for _ in range(writers)]

    def read(i: int) -> None:
        for name in names[i]:
            t = time.perf_counter()
            store.get(name)
            get_ms[i].append((time.perf_counter() - t) * 1000)

    cpu, wall = time.process_time(), time.perf_counter()
    run_threads(writers, read)
    read_s, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
    count = sum(len(n) for n in names)
    gb = count * size / 1e9
    puts = [ms for per in put_ms for ms in per]
    gets = [ms for per in get_ms for ms in per]
    shutil.rmtree(root / f"w{writers}")
    return {
        "write_mb_s": gb * 1000 / wrote_s,
        "read_mb_s": gb * 1000 / read_s,
        "put_p50": pct(puts, 0.5),
        "put_p99": pct(puts, 0.99),
        "get_p50": pct(gets, 0.5),
        "get_p99": pct(gets, 0.99),
        "cpu_per_gb": (wrote_cpu + read_cpu) / gb / 2,
    }


def main(root: Path, writers: list[int], seconds: float, kb: int) -> None:
    print(f"local blob store at {root}; {kb} kB screenshots, {seconds:g} s of writing a point")
    print(
        "writers | written MB/s | read MB/s | put p50 / p99 ms | get p50 / p99 ms | CPU s / GB (write, read)"
    )
    last = 0.0
    for n in writers:
        p = point(root, n, seconds, kb * 1000)
        print(f"{n:7d} | {p['write_mb_s']:12.0f} | {p['read_mb_s']:9.0f} | {p['put_p50']:6.2f} / "
              f"{p['put_p99']:<7.2f} | {p['get_p50']:6.2f} / {p['get_p99']:<7.2f} | {p['cpu_per_gb']:.2f}")  # fmt: skip
        if last and p["write_mb_s"] < 1.1 * last:
            print(
                f"knee: {n} writers, {p['write_mb_s']:.0f} MB/s written (under 10 % more than half as many)"
            )
            return
        last = p["write_mb_s"]
    print("no knee up to the last point")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--kb", type=int, default=150, help="Screenshot size (kB); 150: a 1280x720 PNG.")
    ap.add_argument("--dir", type=Path, help="Where to make the store (default: a temporary directory).")
    a = ap.parse_args()
    if a.dir:
        main(a.dir, a.writers, a.seconds, a.kb)
    else:
        from cua_stream.config import state_dir

        base = state_dir()
        base.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=base, prefix="bench-blobs-") as root:
            main(Path(root), a.writers, a.seconds, a.kb)
