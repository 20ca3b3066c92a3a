"""`cua-stream broker start|status|stop` on a second, private broker (the session one keeps running)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cua_stream.config import cache_dir
from tests.conftest import broker_port, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def broker(*args: str, home: Path, port: int) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cua_stream", "broker", *args, "--home", str(home), "--port", str(port)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=os.environ.copy())


def test_start_status_stop_and_cache_reuse(tmp_path: Path) -> None:
    home, port = tmp_path / "b", broker_port()
    res = broker("start", home=home, port=port)
    assert res.returncode == 0, res.stderr
    assert "running" in res.stdout and f"127.0.0.1:{port}" in res.stdout
    libs = cache_dir() / "kafka" / "4.1.1" / "libs"
    mtimes = {p.name: p.stat().st_mtime_ns for p in libs.iterdir()}
    try:
        assert (home / "data" / "meta.properties").exists()  # formatted KRaft storage
        assert "Kafka Server started" in (home / "logs" / "server.log").read_text()
        status = broker("status", home=home, port=port)
        assert status.returncode == 0 and "running" in status.stdout
        again = broker("start", home=home, port=port)  # idempotent: reports the running broker
        assert again.returncode == 0 and "running" in again.stdout
        # compose/local.yml would publish Kafka on the broker's port: before, `docker compose up` failed
        # inside with "address already in use"; local-env says which broker holds it and how to stop it
        local_env = subprocess.run(
            [sys.executable, "-m", "cua_stream", "containers", "local-env", "--models", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
            env=os.environ | {"CUA_BROKER_HOME": str(home), "KAFKA_HOST_PORT": str(port), "COLUMNS": "300"},
        )  # fmt: skip
        said = local_env.stderr.strip()
        assert local_env.returncode == 2 and local_env.stdout == "" and len(said.splitlines()) == 1, said
        assert "a local Kafka broker (pid " in said and f"listens on 127.0.0.1:{port}" in said, said
        assert "cua-stream broker stop" in said and "KAFKA_HOST_PORT" in said, said
    finally:
        stopped = broker("stop", home=home, port=port)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert "shut down completed" in (home / "logs" / "server.log").read_text()  # a clean shutdown
    assert broker("status", home=home, port=port).returncode == 1
    # a second start reuses the cached jars (nothing downloaded again) and the formatted storage
    res = broker("start", home=home, port=port)
    assert res.returncode == 0, res.stderr
    broker("stop", home=home, port=port)
    assert {p.name: p.stat().st_mtime_ns for p in libs.iterdir()} == mtimes


def test_a_cluster_id_starting_with_a_dash_formats_and_starts(tmp_path: Path) -> None:
    """1 in 64 random ids starts with '-' (the first demo on this machine drew one): the storage tool
    must not take it for an option. New ids never start with '-'; a home with such an id still starts."""
    from cua_stream.broker.local import new_cluster_id

    assert not any(new_cluster_id().startswith("-") for _ in range(2000))
    home, port = tmp_path / "b", broker_port()
    home.mkdir()
    (home / "cluster-id").write_text("-cMFmZe7Tmad1mDGK7irbA")
    res = broker("start", home=home, port=port)
    try:
        assert res.returncode == 0, res.stderr
        assert "-cMFmZe7Tmad1mDGK7irbA" in (home / "data" / "meta.properties").read_text()
    finally:
        broker("stop", home=home, port=port)


def test_port_in_use_is_a_clear_error(tmp_path: Path, kafka_bootstrap: str) -> None:
    busy = int(kafka_bootstrap.rsplit(":", 1)[1])
    res = broker("start", home=tmp_path / "b", port=busy)
    assert res.returncode == 2
    assert "already in use" in res.stderr


def test_a_failed_start_shows_its_cause_not_the_shutdown_noise(tmp_path: Path) -> None:
    port = broker_port()
    with socket.socket() as taken:  # the KRaft controller's port (port + 1) is taken
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        res = broker("start", home=tmp_path / "b", port=port)
    assert res.returncode == 2
    err = " ".join(res.stderr.split())
    assert "the broker exited during start" in err and "Address already in use" in err
    assert f"{port + 1}" in err and "full log:" in err


def test_sigterm_while_the_broker_is_down_exits_cleanly(tmp_path: Path) -> None:
    home, port = tmp_path / "b", broker_port()
    assert broker("start", home=home, port=port).returncode == 0
    bootstrap = ["--bootstrap", f"127.0.0.1:{port}", "--prefix", "sig"]
    cli = [sys.executable, "-m", "cua_stream"]
    try:
        done = subprocess.run([*cli, "topics", "create", *bootstrap], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        with subprocess.Popen([*cli, "scorer", *bootstrap], stderr=subprocess.PIPE, text=True) as scorer:
            assert scorer.stderr is not None
            for line in scorer.stderr:  # wait until it is consuming
                if "scorer ready" in line:
                    break
            assert broker("stop", home=home, port=port).returncode == 0
            time.sleep(2)
            scorer.send_signal(signal.SIGTERM)
            rest = scorer.stderr.read()
            assert scorer.wait(timeout=90) == 0, rest[-3000:]
        assert "Traceback" not in rest
    finally:
        broker("stop", home=home, port=port)


def test_a_daemon_at_a_prefix_without_topics_says_so(kafka_bootstrap: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "cua_stream", "scorer", "--bootstrap", kafka_bootstrap, "--prefix", "no-such"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    err = " ".join(res.stderr.split())
    assert "topic 'no-such.outcomes' does not exist" in err and "topics create --prefix no-such" in err


@pytest.mark.anyio
async def test_a_chaos_broker_restart_waits_while_its_port_is_taken_then_starts(tmp_path: Path) -> None:
    """A restart under chaos can find its port held for a moment (an outgoing socket handed that port, a
    client connected to itself); it tries again until the port is free instead of ending the run."""
    import anyio

    from cua_stream.app.chaos.runner import BrokerTarget
    from cua_stream.broker import BrokerConfig, LocalBroker

    class Counted(LocalBroker):
        starts = 0

        def start(self, *, fresh: bool = False) -> object:
            Counted.starts += 1
            return super().start(fresh=fresh)

    port = broker_port()
    target = BrokerTarget(Counted(BrokerConfig(home=str(tmp_path / "b"), port=port)))
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", port))
            taken.listen()
            async with anyio.create_task_group() as tg:
                tg.start_soon(target.restart, 0.0, False)
                with anyio.fail_after(120):

                    async def retrying() -> bool:  # refused once, and trying again
                        return Counted.starts >= 2

                    await wait_until(retrying)
                taken.close()
        assert target.broker.status().running and Counted.starts >= 2
    finally:
        target.broker.stop()
