"""A short chaos run of the whole loop (`cua-stream chaos`, fast mode): real broker, engine, gateway,
scorer, two producers and the trainer as separate processes, while a seeded schedule SIGKILLs and
restarts each kind of daemon, pauses some, restarts the broker and writes an undecodable record; then
every invariant is checked from the topics."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cua_stream.chaos.schedule import POISON_TARGET, kind, plan, tally

SEED, FAULTS, EVERY_S, STEPS = 79, 12, 2.5, 8
"""Seed 79's first 12 faults SIGKILL producers, the scorer, the trainer, the gateway and the engine, pause
the trainer, SIGKILL the broker and restart it, and poison the outcome topic, all in ~31 s."""


def free_base(span: int = 30) -> int:
    """A base port with ``span`` free ports above it, below the kernel's ephemeral range: the daemons are
    killed and rebind their ports all run long, and a port in that range can meanwhile be handed to any
    outgoing connection (a Kafka client's), and the restarted daemon then cannot listen."""
    rng = random.Random()
    ephemeral_from = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        base = rng.randrange(10000, ephemeral_from - span)
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 2 minutes here; the broker's restart alone takes ~15 s
def test_nothing_is_lost_or_trained_twice_while_every_daemon_and_the_broker_fail(tmp_path: Path) -> None:
    wanted = tally(plan(SEED, FAULTS, every_s=EVERY_S, producers=2))
    for daemon in ("producer", "scorer", "trainer", "gateway", "engine"):
        assert wanted.get((daemon, "kill")), f"the seed no longer kills the {daemon}"
    assert wanted[("broker", "broker_restart")] and wanted[(POISON_TARGET, "poison")]
    assert any(f.hard for f in plan(SEED, FAULTS, every_s=EVERY_S, producers=2) if f.target == "broker")
    home = tmp_path / "chaos"
    args = [
        "chaos",
        "--seed",
        str(SEED),
        "--faults",
        str(FAULTS),
        "--every",
        str(EVERY_S),
        "--steps",
        str(STEPS),
    ]
    args += ["--base-port", str(free_base()), "--home", str(home)]
    done = subprocess.run(
        [sys.executable, "-m", "cua_stream", *args],
        capture_output=True, text=True, timeout=1200, env=os.environ.copy(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    report = json.loads((home / "report.json").read_text())
    assert report["ok"] and report["steps"] == STEPS
    applied = {(kind(f["target"]), f["action"]) for f in report["faults"]}
    assert len(report["faults"]) == FAULTS and report["skipped"] == 0, report["faults"]
    assert applied == set(wanted)
    by_name = {c["name"]: c for c in report["checks"]}
    assert sum(c["lost"] for c in report["checks"]) == 0
    assert sum(c["duplicated"] for c in report["checks"]) == 0
    assert by_name["trained episodes = the expected set"]["checked"] > 0
    assert by_name["loopback only; admin routes need the admin key"]["checked"] == 1  # probed, none open
    assert by_name["no session key in records, logs, files, metrics"]["checked"] > 100
    assert by_name["undecodable records are dead-lettered"]["checked"] == wanted[(POISON_TARGET, "poison")]
    # sampled while it ran: every daemon's memory, and the work in the producers' hands as their lag
    assert {m["daemon"] for m in report["memory"]} >= {"broker", "engine", "gateway", "scorer", "trainer"}
    assert report["consumer_lag"]["producers"][2] > 0
    # every kill restarted its daemon: more starts than daemons
    assert report["starts"]["trainer"] >= 2 and report["starts"]["engine"] >= 2
    assert "lost 0, duplicated 0" in done.stdout.replace("\n", " ")
