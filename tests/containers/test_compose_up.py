"""compose/ started for real: `docker compose up` of the one-node and the three-node files, on the images
built here (compose/local.yml: Kafka from the pinned jars, the reference engine for SGLang, moto's S3
server for MinIO). GRPO steps go through the containers, and the chaos invariants hold on what the
topics hold. The one-node run's cua-stream services come from the self-contained image
(compose/local-image.yml) and its producer runs each episode in Harbor's docker environment on the same
daemon (compose/docker-producer.yml); in the three-node run (the checkout mounted) one broker container is killed
and started again mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from cua_stream.app.chaos.evidence import read_run
from cua_stream.app.chaos.invariants import RunLog, check_all, totals, work_answered
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.containers import app_image, images, local_compose, service_images
from cua_stream.containers.dockerd import DockerHome
from cua_stream.events import TrainStep
from cua_stream.topics import TRAIN_STEPS
from producers.environments import OWNER
from tests.conftest import free_port
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

# Up to 65 s to start and 480 s for the steps (wait_for_steps): more than the default 300 s under load.
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.containers,
    pytest.mark.timeout(720),
]

MAX_IN_FLIGHT = 3
"""compose/docker-compose.yml's trainer: (max_staleness 2 + 1) × 1 group per step (compose/local.yml)."""


class Deployment:
    def __init__(
        self,
        project: str,
        env: dict[str, str],
        *,
        three_nodes: bool,
        secure: bool = False,
        image: bool = False,
        docker_producer: bool = False,
    ) -> None:
        self.args = local_compose.compose_args(
            project, three_nodes=three_nodes, secure=secure, image=image, docker_producer=docker_producer
        )
        self.env = env

    def ran_from(self, service: str) -> list[tuple[str, list[str]]]:
        """Per container of ``service`` (running or exited): its image and its mounts' sources."""
        ids = self.compose("ps", "-a", "-q", service).stdout.split()
        fmt = "{{.Config.Image}}{{range .Mounts}} {{.Source}}{{end}}"
        out = subprocess.run(["docker", "inspect", "--format", fmt, *ids], capture_output=True, text=True,
                             env=self.env, check=True).stdout  # fmt: skip
        return [(line.split()[0], line.split()[1:]) for line in out.splitlines()]

    def compose(self, *verb: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *self.args, *verb], capture_output=True, text=True, env=self.env,
                              timeout=timeout)  # fmt: skip

    def producer_hosts(self) -> set[str]:
        """The producer containers' host names (their short ids): the host part of their episodes' label."""
        return {c[:12] for c in self.compose("ps", "-a", "-q", "producer").stdout.split()}

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "40").stdout[-12000:]


@pytest.fixture
def deployment(
    request: pytest.FixtureRequest, docker_engine: DockerHome, tiny_model_dir: Path, tmp_path: Path
) -> Iterator[tuple[Deployment, BusConfig, str]]:
    three = request.param == "three"
    built = [images.build_base(docker_engine, say=print), *service_images.build_services(docker_engine)]
    if not three:  # the one-node run's cua-stream services come from the self-contained image
        built += app_image.build_app(docker_engine, say=print)
    for b in built:
        print(f"image {b.name}: {'built' if b.built else 'up to date'} ({b.seconds:.1f} s)")
    run_id = f"compose-{uuid.uuid4().hex[:6]}"
    ports = {
        "KAFKA_HOST_PORT": free_port(),
        "GATEWAY_HOST_PORT": free_port(),
        "DASHBOARD_HOST_PORT": free_port(),
    }
    if three:
        ports |= {"KAFKA_2_HOST_PORT": free_port(), "KAFKA_3_HOST_PORT": free_port()}
    env = dict(os.environ) | {k: str(v) for k, v in ports.items()}
    env |= local_compose.local_env(
        local_compose.checkout_root(), tiny_model_dir.parent, {}, tiny_model_dir.name
    )
    env |= {"RUN_ID": run_id, "TRAINER_MAX_STEPS": "6" if three else "3"}
    if not three:  # its producer runs each episode in a container of its own, on the same daemon
        env |= local_compose.docker_producer_env(docker_engine, tmp_path / "trials")
        env |= {"PRODUCER_CONCURRENCY": "2"}  # 4 desktops at once are too many for 2 cores beside the rest
    bootstrap = ",".join(f"127.0.0.1:{ports[k]}" for k in ports if k.startswith("KAFKA"))
    dep = Deployment(f"cua-test-{run_id}", env, three_nodes=three, image=not three, docker_producer=not three)
    try:
        up = dep.compose("up", "-d")
        assert up.returncode == 0, up.stderr[-4000:] + dep.logs()
        yield dep, BusConfig(bootstrap_servers=bootstrap, topic_prefix="cua"), run_id
    finally:
        hosts = dep.producer_hosts()
        dep.compose("down", "-v", "--remove-orphans", "--timeout", "5")
        if left := episodes_of(hosts):  # a failed run's episodes: not for the next test to find
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)


def trial_results(trials: Path) -> list[dict]:
    return [json.loads(r.read_text()) for r in trials.rglob("result.json")]


def episodes_of(hosts: set[str]) -> list[str]:
    """The episode containers (running or not) whose producer label (``host:pid:start``) names one of
    ``hosts``."""
    fmt = f'{{{{.ID}}}} {{{{.Label "{OWNER}"}}}}'
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={OWNER}", "--format", fmt],
                         capture_output=True, text=True, check=True)  # fmt: skip
    pairs = [line.split(" ", 1) for line in out.stdout.splitlines()]
    return [cid for cid, owner in pairs if owner.split(":")[0] in hosts]


async def steps_done(bus: BusConfig) -> list[int]:
    return [d.event.step async for d in scan(bus, TRAIN_STEPS) if isinstance(d.event, TrainStep)]


async def wait_for_steps(bus: BusConfig, n: int, dep: Deployment, timeout_s: float = 480) -> None:
    deadline = time.monotonic() + timeout_s
    while len(await steps_done(bus)) < n:
        assert time.monotonic() < deadline, f"{n} steps not trained in {timeout_s:.0f} s:\n{dep.logs()}"
        await anyio.sleep(3)


async def nothing_lost(bus: BusConfig, run_id: str, settle_s: float = 240) -> RunLog:
    """The run's records from the topics, every chaos invariant holding on them: 0 lost, 0 duplicated.
    Episodes still running when the trainer stopped get ``settle_s`` to publish their outcomes."""
    deadline = time.monotonic() + settle_s
    log = await read_run(bus, run_id)
    while not work_answered(log).ok and time.monotonic() < deadline:
        await anyio.sleep(3)
        log = await read_run(bus, run_id)
    checks = check_all(log, max_in_flight=MAX_IN_FLIGHT)
    assert totals(checks) == (0, 0) and all(not c.problems for c in checks), checks
    return log


async def replicas(bus: BusConfig) -> set[int]:
    """How many replicas the registry's partitions have (one number when they all agree)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bus.bootstrap_servers)
    await admin.start()
    try:
        names = [n for n in await admin.list_topics() if n.startswith("cua.")]
        return {len(p["replicas"]) for t in await admin.describe_topics(names) for p in t["partitions"]}
    finally:
        await admin.close()


@pytest.mark.anyio
@pytest.mark.parametrize("deployment", ["one"], indirect=True)
async def test_one_node_compose_trains_grpo_steps_on_episodes_in_docker_and_keeps_every_record(
    deployment: tuple[Deployment, BusConfig, str],
) -> None:
    dep, bus, run_id = deployment
    await wait_for_steps(bus, 3, dep)
    log = await nothing_lost(bus, run_id)
    # every trained episode was a Harbor trial in the docker environment, run by the producer container
    # on the host's daemon, its verifier's reward read back through the trials dir's same-path mount
    results = trial_results(Path(dep.env["CUA_TRIALS_DIR"]))
    assert len(results) >= 6, dep.logs()
    assert {r["config"]["environment"]["type"] for r in results} == {"docker"}
    assert all(r.get("verifier_result") for r in results), results[0]
    owners = dep.producer_hosts()
    assert [s.step for s in log.steps] == [1, 2, 3] and [v.version for v in log.policy] == [1, 2, 3]
    # the engine container serves the trainer container's last weights (read from the shared volume)
    info = dep.compose("exec", "-T", "engine", f"{dep.env['CUA_CHECKOUT']}/.venv/bin/python", "-c",
                       "import json, os, urllib.request as u; print(json.load(u.urlopen(u.Request("
                       "'http://127.0.0.1:30000/get_model_info', headers={'Authorization': 'Bearer ' + "
                       "os.environ['CUA_ENGINE_API_KEY']})))['weight_version'])")  # fmt: skip
    assert info.stdout.strip() == "3", info.stderr
    assert await replicas(bus) == {1}
    # a producer stopped (SIGTERM) takes its episodes' containers down with their trials
    stopped = dep.compose("stop", "--timeout", "60", "producer")
    assert stopped.returncode == 0, stopped.stderr
    assert not episodes_of(owners), dep.logs()
    # every cua-stream service ran from the self-contained image, nothing of the checkout mounted
    for service in ("topics", "gateway", "producer", "scorer", "trainer", "dashboard"):
        for image, sources in dep.ran_from(service):
            assert image == app_image.APP, (service, image)
            assert not any(s.startswith(dep.env["CUA_CHECKOUT"]) for s in sources), (service, sources)


@pytest.mark.anyio
@pytest.mark.parametrize("deployment", ["three"], indirect=True)
async def test_three_nodes_lose_and_duplicate_nothing_when_a_broker_is_killed_mid_run(
    deployment: tuple[Deployment, BusConfig, str],
) -> None:
    dep, bus, run_id = deployment
    assert await replicas(bus) == {3}
    await wait_for_steps(bus, 1, dep)
    killed = dep.compose("kill", "kafka-2")
    assert killed.returncode == 0, killed.stderr
    await wait_for_steps(bus, 3, dep)  # trained on with a node down (two in sync: min.insync.replicas)
    started = dep.compose("start", "kafka-2")
    assert started.returncode == 0, started.stderr
    await wait_for_steps(bus, 6, dep)
    log = await nothing_lost(bus, run_id)
    assert [s.step for s in log.steps] == [1, 2, 3, 4, 5, 6]
