"""compose/secure.yml started for real on the images built here: Kafka's client listeners SASL_SSL
(SCRAM-SHA-512 over TLS) with the ACL authorizer, the users created at format time, `topics` granting
each role its ACLs as admin, every service its own principal. GRPO steps go through the containers and
the chaos invariants hold on what the topics hold (read from the host as admin, over TLS and SCRAM); a
plaintext client and a role's forbidden write are refused, and no password is in the deployment's
environment or command lines."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from cua_stream.bus.acl import ROLES
from cua_stream.bus.connect import AUTHORIZATION_ERRORS
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.containers import images, local_compose, secure_compose, service_images
from cua_stream.containers.dockerd import DockerHome
from cua_stream.errors import BusRefused
from cua_stream.topics import SCORES
from tests.conftest import free_port
from tests.containers.test_compose_up import Deployment, nothing_lost, wait_for_steps
from tests.integration.gateway_servers import tiny_model_dir
from tests.unit.samples import SAMPLES

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.containers]


@pytest.fixture
def secured(
    docker_engine: DockerHome, tiny_model_dir: Path, tmp_path: Path
) -> Iterator[tuple[Deployment, Path, str, str]]:
    for built in [images.build_base(docker_engine, say=print), *service_images.build_services(docker_engine)]:
        print(f"image {built.name}: {'built' if built.built else 'up to date'} ({built.seconds:.1f} s)")
    run_id = f"secure-{uuid.uuid4().hex[:6]}"
    ports = {
        "KAFKA_HOST_PORT": free_port(),
        "GATEWAY_HOST_PORT": free_port(),
        "DASHBOARD_HOST_PORT": free_port(),
    }
    folder = tmp_path / "kafka-secrets"
    env = dict(os.environ) | {k: str(v) for k, v in ports.items()}
    env |= local_compose.local_env(
        local_compose.checkout_root(), tiny_model_dir.parent, {}, tiny_model_dir.name
    )
    env |= secure_compose.ensure_secrets(folder) | {"RUN_ID": run_id, "TRAINER_MAX_STEPS": "3"}
    dep = Deployment(f"cua-sec-{run_id}", env, three_nodes=False, secure=True)
    try:
        up = dep.compose("up", "-d")
        assert up.returncode == 0, up.stderr[-4000:] + dep.logs()
        yield dep, folder, f"127.0.0.1:{ports['KAFKA_HOST_PORT']}", run_id
    finally:
        dep.compose("down", "-v", "--remove-orphans", "--timeout", "5")


async def count(bus: BusConfig, spec: object) -> int:
    return len([d async for d in scan(bus, spec)])  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_secured_compose_trains_as_each_role_and_refuses_the_rest(
    secured: tuple[Deployment, Path, str, str],
) -> None:
    dep, folder, bootstrap, run_id = secured
    admin = secure_compose.host_bus(folder, "admin", bootstrap)
    await wait_for_steps(admin, 3, dep)
    log = await nothing_lost(admin, run_id)
    assert [s.step for s in log.steps] == [1, 2, 3] and [v.version for v in log.policy] == [1, 2, 3]

    # a plaintext client is told the listener speaks TLS and wants SASL_SSL, not "broker down"
    plain = BusConfig(bootstrap_servers=bootstrap, topic_prefix="cua", connect_timeout_s=3)
    with pytest.raises(BusRefused, match="requires SASL_SSL"):
        async with EventProducer(plain):
            pass
    # the producer's principal may not write scores (only the scorer may): refused, nothing written
    scores_before = await count(admin, SCORES)
    producer = msgspec.structs.replace(
        secure_compose.host_bus(folder, "producer", bootstrap), connect_timeout_s=10
    )
    with pytest.raises((BusRefused, *AUTHORIZATION_ERRORS)):
        async with EventProducer(producer) as p:
            await p.publish(SCORES, SAMPLES["score"])
    assert await count(admin, SCORES) == scores_before

    # each service its own principal, its password a file: none in any environment or command line
    config = dep.compose("config")
    assert config.returncode == 0, config.stderr
    for role in ("gateway", "producer", "scorer", "trainer", "reader", "admin"):
        assert f"CUA_SASL_USERNAME: {role}" in config.stdout, role
    for role in ROLES:
        password = (folder / "secrets" / f"{role}.password").read_text().strip()
        assert password not in config.stdout, role
