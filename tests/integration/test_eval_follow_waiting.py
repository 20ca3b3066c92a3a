"""``eval follow`` of a run that has published no version, on the real broker, under a topic prefix
given with ``--prefix`` (before: no such option on ``eval``, and the follower waited without saying
where it looked). It says, in one line, which run's first version it waits for, on which topic, and
which runs do have versions there; Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import PolicyVersion
from cua_stream.topics import POLICY

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]


async def publish_version(bus: BusConfig, run_id: str) -> None:
    async with EventProducer(bus) as producer:
        await producer.publish(POLICY, PolicyVersion(run_id=run_id, version=1, weights_path="/w/v1", step=1,
                                                     published_at=time.time()))  # fmt: skip


@pytest.mark.timeout(300)
def test_following_a_run_without_versions_says_what_it_waits_for(
    bus_config: BusConfig, tmp_path: Path
) -> None:
    anyio.run(publish_version, bus_config, "train-other")
    env = {k: v for k, v in os.environ.items() if k != "CUA_TOPIC_PREFIX"}  # the prefix from --prefix only
    command = [
        sys.executable, "-m", "cua_stream", "eval", "follow", "train-missing", "--engine", "shared",
        "--gateway-url", "http://127.0.0.1:9", "--environment", "scripted", "--tasks", "click-button",
        "--bootstrap", bus_config.bootstrap_servers, "--prefix", bus_config.topic_prefix,
    ]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env | {"CUA_HOME": str(tmp_path / "home"), "COLUMNS": "300"},
    ) as follower:  # fmt: skip
        said = []
        assert follower.stdout is not None
        for line in follower.stdout:  # until it waits (the test's timeout bounds this)
            said.append(line.rstrip())
            if "waiting for" in line:
                break
        else:
            raise AssertionError(f"ended ({follower.wait()}) without waiting:\n" + "\n".join(said))
        follower.send_signal(signal.SIGINT)
        rest, _ = follower.communicate(timeout=120)
    assert said[-1].strip() == (
        f"waiting for run train-missing's first policy version on topic {bus_config.topic_prefix}.policy "
        "(runs with versions there: train-other); Ctrl-C stops"
    ), "\n".join(said)
    assert follower.returncode == 130, rest
