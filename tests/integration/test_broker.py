"""`cua-stream broker start|status|stop` on a second, private broker (the session one keeps running)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cua_stream.config import cache_dir
from tests.conftest import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def broker(*args: str, home: Path, port: int) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cua_stream", "broker", *args, "--home", str(home), "--port", str(port)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=os.environ.copy())


def test_start_status_stop_and_cache_reuse(tmp_path: Path) -> None:
    home, port = tmp_path / "b", free_port()
    while free_port() == port + 1:  # the controller listens on port + 1
        port = free_port()
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


def test_port_in_use_is_a_clear_error(tmp_path: Path, kafka_bootstrap: str) -> None:
    busy = int(kafka_bootstrap.rsplit(":", 1)[1])
    res = broker("start", home=tmp_path / "b", port=busy)
    assert res.returncode == 2
    assert "already in use" in res.stderr
