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

from cua_stream.app.chaos.fault_schedule import POISON_TARGET, kind, plan, tally
from cua_stream.broker import ephemeral_range

SEED, FAULTS, EVERY_S, STEPS, SECURE_STEPS = 79, 12, 2.5, 8, 4
"""Seed 79's first 12 faults SIGKILL producers, the scorer, the trainer, the gateway and the engine, pause
the trainer, SIGKILL the broker and restart it, and poison the outcome topic, all in ~31 s."""


def free_base(span: int = 30) -> int:
    """A base port with ``span`` free ports above it, below the kernel's ephemeral range: the daemons are
    killed and rebind their ports all run long, and a port in that range can meanwhile be handed to any
    outgoing connection (a Kafka client's), and the restarted daemon then cannot listen."""
    rng = random.Random()
    ephemeral_from = ephemeral_range()[0]
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
    done, report = run_chaos(tmp_path / "chaos", STEPS)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert report["ok"] and report["steps"] >= STEPS  # it trains on until the whole schedule has healed
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


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 70 s here
def test_the_loop_survives_its_faults_on_a_secured_broker_each_daemon_its_own_principal(
    tmp_path: Path,
) -> None:
    """Least privilege is enough: the same faults (broker restarts included) on a SASL_SSL broker with the
    topic registry's ACLs, every daemon connected as its role, and still 0 lost, 0 duplicated."""
    home = tmp_path / "chaos"
    done, report = run_chaos(home, SECURE_STEPS, "--secure")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert report["ok"] and report["steps"] >= SECURE_STEPS
    assert len(report["faults"]) == FAULTS and report["skipped"] == 0, report["faults"]
    assert {(kind(f["target"]), f["action"]) for f in report["faults"]} >= {("broker", "broker_restart")}
    assert sum(c["lost"] + c["duplicated"] for c in report["checks"]) == 0
    assert report["principals"] == {
        "gateway": "gateway", "scorer": "scorer", "trainer": "trainer",
        "producer-0": "producer", "producer-1": "producer",
    }  # fmt: skip
    # the daemons' shared config names no principal and holds no password: each has its own, from its
    # environment (the password as a file only its user reads)
    shared = (home / "chaos.yaml").read_text()
    assert "sasl_username" not in shared and "password" not in shared and "SASL_SSL" in shared
    assert "principals (SASL_SSL): gateway as gateway" in done.stdout.replace("\n", " ")


def run_chaos(home: Path, steps: int, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``cua-stream chaos`` with the pinned schedule; its process and its report."""
    args = [
        "chaos",
        "--seed",
        str(SEED),
        "--faults",
        str(FAULTS),
        "--every",
        str(EVERY_S),
        "--steps",
        str(steps),
    ]
    args += ["--base-port", str(free_base()), "--home", str(home), *extra]
    done = subprocess.run(
        [sys.executable, "-m", "cua_stream", *args],
        capture_output=True, text=True, timeout=1200, env=os.environ.copy(),
    )  # fmt: skip
    report_file = home / "report.json"
    return done, json.loads(report_file.read_text()) if report_file.exists() else {}
