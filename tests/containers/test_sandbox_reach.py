"""What an episode's sandbox can reach (the docker environment, its default ``container_network: none``):
nothing of the control plane. From inside a running episode's container, the broker, the engine and the
gateway (its admin routes with it) cannot be connected to; the same probe run on the host reaches all
three, so the probe itself works. computer-1 runs on the host and only execs into the container: the
agent's one way out is its session's chat route, which the producer gave the agent, not the sandbox."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from cua_stream.config import BusConfig, Secret
from cua_stream.containers.dockerd import DockerHome
from cua_stream.events import TaskRef, WorkRequest
from producers.config import ProducerConfig
from producers.environments import EPISODE
from producers.episode import EpisodeRun
from producers.trial import TrialRunner
from tests.conftest import wait_until
from tests.containers.conftest import containers
from tests.integration.gateway_servers import EngineProcess, GatewayProcess, engine, gateway, tiny_model_dir

__all__ = ["engine", "gateway", "tiny_model_dir"]  # fixtures

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.containers,
    pytest.mark.harbor,
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

PROBE = """
import json, socket, sys
seen = {}
for name, host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=3).close()
        seen[name] = "connected"
    except OSError as e:
        seen[name] = type(e).__name__ + ": " + str(e)
seen["interfaces"] = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:])
print(json.dumps(seen))
"""
"""Connects to each (name, host, port) and says what happened; lists the network interfaces it has."""


def _address(url: str) -> tuple[str, int]:
    parsed = httpx.URL(url)
    assert parsed.host and parsed.port
    return parsed.host, parsed.port


async def test_an_episodes_container_cannot_reach_the_broker_the_engine_or_the_gateway(
    docker_engine: DockerHome, bus_config: BusConfig, engine: EngineProcess, gateway: GatewayProcess,
    tmp_path: Path,
) -> None:  # fmt: skip
    broker_host, broker_port = bus_config.bootstrap_servers.split(",")[0].rsplit(":", 1)
    targets = [
        ("broker", broker_host, int(broker_port)),
        ("engine", *_address(engine.url)),
        ("gateway", *_address(gateway.url)),
    ]
    request = WorkRequest(run_id="reach", group_id="reach-g0", episode_id="reach-e0", task=TaskRef(name="click-test"),
                          sample_index=0, group_size=1, policy_version=0, created_at=time.time())  # fmt: skip
    runner = TrialRunner(
        ProducerConfig(environment="docker", trials_dir=str(tmp_path / "trials"), max_turns=3)
    )
    async with httpx.AsyncClient(timeout=60) as http:
        session = {"run_id": request.run_id, "group_id": request.group_id, "episode_id": request.episode_id,
                   "attempt": 1, "sampling": {"temperature": 1.0, "max_new_tokens": 24}}  # fmt: skip
        opened = (await http.post(f"{gateway.url}/sessions", json=session)).json()
    run = EpisodeRun(work=request, attempt=1, seed=5, session_url=f"{gateway.url}{opened['base_url']}",
                     session_key=Secret(opened["session_key"]), context_length=32768)  # fmt: skip
    inside: dict[str, str] = {}
    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:

            async def probe_mid_episode() -> None:
                async def running() -> bool:
                    return bool(containers(f"{EPISODE}={request.episode_id}"))

                await wait_until(running, 0.2)
                (container,) = containers(f"{EPISODE}={request.episode_id}")
                done = await anyio.run_process(
                    ["docker", "exec", container, "python3", "-c", PROBE, json.dumps(targets)], check=False
                )
                assert done.returncode == 0, done.stderr.decode()
                inside.update(json.loads(done.stdout))

            tg.start_soon(probe_mid_episode)
            result = await runner.run(run)
    assert result.outcome.agent_started, result.outcome.exception  # the probe ran in a live episode
    probed = await anyio.run_process([sys.executable, "-c", PROBE, json.dumps(targets)], check=True)
    on_host = json.loads(probed.stdout)
    assert {on_host[name] for name, _, _ in targets} == {"connected"}, on_host  # the probe can connect
    for name, _, _ in targets:
        assert inside[name] != "connected", (name, inside)
    assert inside["interfaces"] == ["lo"], inside  # no network at all: no other address to try
