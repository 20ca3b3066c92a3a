"""The bus on a secured local broker (SASL_SSL, SCRAM-SHA-512, the KRaft ACL authorizer): each role's
principal does its own work, and nothing else.

One broker for the module (its own port and home); each test uses its own topic prefix, created by the
admin principal with that prefix's ACLs (``acls(prefix)``)."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import ssl
import stat
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from consumers.scorer.config import ScorerConfig
from consumers.scorer.daemon import Scorer
from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.broker.tls import ensure_tls
from cua_stream.bus.acl import ROLES, acls
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.codec import Delivery
from cua_stream.bus.connect import AUTHORIZATION_ERRORS
from cua_stream.bus.consumer import EventConsumer
from cua_stream.bus.follow import Follower
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import read_events, scan
from cua_stream.config import BusConfig, build, convert
from cua_stream.errors import BusRefused
from cua_stream.events import Event
from cua_stream.topics import (
    ALL,
    DLQ,
    EVAL_WORK,
    EVALS,
    OUTCOMES,
    POLICY,
    SCORES,
    SUMMARIES,
    TRAIN_STEPS,
    TURNS,
    WORK,
    TopicSpec,
)
from tests.conftest import broker_port, wait_until
from tests.unit.samples import SAMPLES

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.anyio]


@dataclass
class Secured:
    broker: LocalBroker
    start_s: float

    def bus(self, role: str, prefix: str, **fields: Any) -> BusConfig:
        """The bus of a client of this broker as ``role`` (the way a daemon's [bus] section reads)."""
        base = {"topic_prefix": prefix, "episode_partitions": 2, "client_id": f"test-{role}"}
        return convert(BusConfig, "bus", {**self.broker.client_bus(role), **base, **fields})

    async def new_prefix(self) -> str:
        """A fresh prefix whose topics and ACLs the admin principal created."""
        prefix = f"s-{uuid.uuid4().hex[:8]}"
        async with TopicAdmin(self.bus("admin", prefix)) as admin:
            await admin.create()
            await admin.create_acls(acls(prefix))
        return prefix


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    port = broker_port()
    home = tmp_path_factory.mktemp("secure-kafka")
    broker = LocalBroker(BrokerConfig(home=str(home), port=port, controller_port=port + 1, secure=True))
    t0 = time.monotonic()
    broker.start()
    try:
        yield Secured(broker, time.monotonic() - t0)
    finally:
        broker.stop()


def test_the_broker_is_secured_and_its_secrets_are_private(secured: Secured) -> None:
    home = secured.broker.home
    props = (home / "server.properties").read_text()
    assert "PLAINTEXT" not in props  # no unauthenticated listener at all
    assert "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL" in props
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in props
    assert "allow.everyone.if.no.acl.found=false" in props
    assert "super.users=User:admin;User:CN=cua-stream-broker" in props
    private = [home / "server.properties", home / "tls" / "broker.pem"]
    private += [home / "secrets" / f"{role}.password" for role in ROLES]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in private} == {p.name: 0o600 for p in private}
    status = secured.broker.status()
    assert status.running and status.secure and "SASL_SSL" in status.describe()
    # the controller listener takes only a client certificate signed by the broker's CA (the broker's own)
    trusting = ssl.create_default_context(cafile=str(home / "tls" / "ca.pem"))
    with (
        socket.create_connection(("127.0.0.1", secured.broker.config.controller), timeout=10) as raw,
        pytest.raises(ssl.SSLError, match="BAD_CERTIFICATE|CERTIFICATE_REQUIRED"),
        trusting.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"\x00\x00\x00\x04\x00\x12\x00\x00")  # TLS 1.3 reports it at the first read
        tls.recv(16)


async def test_each_role_does_its_own_work(secured: Secured) -> None:
    """One allowed path per role, chained: trainer -> work -> producer -> outcome -> scorer -> score
    -> trainer, and evaluator -> eval_work -> the producers' eval lane; the gateway's turn reaches the
    trainer; the reader reads every topic."""
    prefix = await secured.new_prefix()

    def bus(role: str) -> BusConfig:
        return secured.bus(role, prefix)

    with anyio.fail_after(120):
        async with EventProducer(bus("trainer")) as trainer:
            for spec in (WORK, POLICY, TRAIN_STEPS, DLQ):
                await trainer.publish(spec, sample(spec))
        async with EventProducer(bus("evaluator")) as evaluator:  # an evaluation's work
            await evaluator.publish(EVAL_WORK, sample(EVAL_WORK))
        async with EventProducer(bus("gateway")) as gateway:
            await gateway.publish(TURNS, SAMPLES["turn"])
            await gateway.publish(SUMMARIES, SAMPLES["summary"])

        # producer: its group on work (a commit), the policy topic without a group, an outcome
        got: list[Delivery] = []

        async def take(d: Delivery) -> None:
            got.append(d)

        async with EventProducer(bus("producer")) as out:
            for spec, lane in ((WORK, "producers"), (EVAL_WORK, "eval-producers")):  # each lane's group
                async with EventConsumer(
                    bus("producer"), [spec], group_id=f"{prefix}.{lane}", dead_letters=out
                ) as c:
                    assert await c.run(take, stop_after=1) == 1
            assert [d.event.run_id for d in got] == ["run-7", "eval-7"]
            async with Follower(bus("producer"), [POLICY]) as policy:
                while not (polled := await policy.poll(1.0)):
                    pass
            assert len(polled) == 1
            await out.publish(OUTCOMES, SAMPLES["outcome"])
        async with TopicAdmin(bus("reader")) as admin:  # the group's commit, seen by the reader
            assert sum((await admin.committed(f"{prefix}.producers")).values()) == 1

        # scorer: the real daemon, its transactional id and group (as configured by default)
        await Scorer(ScorerConfig(bus=bus("scorer"))).run(stop_after=1)

        async with EventProducer(bus("evaluator")) as evaluator:  # the evaluation's results
            await evaluator.publish(EVALS, SAMPLES["eval_report"])
        for spec in (EVAL_WORK, OUTCOMES, SCORES, POLICY, EVALS):  # its work again, to resume
            assert [d async for d in scan(bus("evaluator"), spec)], spec.name

        for spec in (TURNS, SUMMARIES, SCORES):  # the trainer's inputs
            assert len(await read_events(bus("trainer"), spec, 1, timeout_s=30)) == 1
        for spec in ALL:  # the reader sees everything
            assert len([d async for d in scan(bus("reader"), spec)]) == 1, spec.name


async def test_the_evaluator_writes_evaluation_work_and_never_training_work(secured: Secured) -> None:
    """The evaluator's principal issues an evaluation's work on eval_work, which only the producers' eval
    lane reads; the broker refuses it the work topic, which training's producers play."""
    prefix = await secured.new_prefix()
    with anyio.fail_after(60):
        async with EventProducer(secured.bus("evaluator", prefix, connect_timeout_s=10)) as evaluator:
            await evaluator.publish(EVAL_WORK, EVAL_REQUEST)
            with pytest.raises(TopicAuthorizationFailedError):
                await evaluator.publish(WORK, SAMPLES["work_request"])
            with pytest.raises(TopicAuthorizationFailedError):  # an eval run's id changes nothing
                await evaluator.publish(WORK, EVAL_REQUEST)
        admin = secured.bus("admin", prefix)
        assert [d.event async for d in scan(admin, EVAL_WORK)] == [EVAL_REQUEST]
        assert [d async for d in scan(admin, WORK)] == []


async def test_a_wrong_password_is_refused_at_once_in_one_line(secured: Secured, tmp_path: Path) -> None:
    prefix = await secured.new_prefix()
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    cases = {
        "file": secured.bus("trainer", prefix, sasl_password_file=str(wrong), connect_timeout_s=120),
        "unknown user": secured.bus("trainer", prefix, sasl_username="mallory", connect_timeout_s=120),
        # the password from the environment (CUA_KAFKA_PASSWORD), the way a daemon reads it
        "environment": build(
            BusConfig,
            "bus",
            env={
                "CUA_BOOTSTRAP_SERVERS": secured.broker.config.bootstrap_servers,
                "CUA_SECURITY_PROTOCOL": "SASL_SSL",
                "CUA_SASL_USERNAME": "gateway",
                "CUA_KAFKA_PASSWORD": "guessed",
                "CUA_SSL_CAFILE": str(secured.broker.home / "tls" / "ca.pem"),
                "CUA_CONNECT_TIMEOUT_S": "120",
            },
        ),
    }
    for name, bus in cases.items():
        t0 = time.monotonic()
        with pytest.raises(BusRefused) as refused:
            async with EventProducer(bus):
                pass
        took = time.monotonic() - t0
        message = str(refused.value)
        # far below the connect timeout a retried failure would wait out (~1 s here, whatever the machine)
        assert took < bus.connect_timeout_s / 2, (
            f"{name}: {took:.1f}s (an authentication failure must not be retried)"
        )
        assert "\n" not in message and "SCRAM-SHA-512" in message and "invalid credentials" in message
        assert "not-the-password" not in message and "guessed" not in message


# A refused client's half-open connection can be collected after the test, and its transport's complaint
# then surfaces as an unraisable warning (seen once in ~10 runs); the refusals are what is tested here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_plaintext_and_untrusting_clients_are_refused(secured: Secured, tmp_path: Path) -> None:
    prefix = await secured.new_prefix()
    bootstrap = secured.broker.config.bootstrap_servers
    plain = BusConfig(bootstrap_servers=bootstrap, topic_prefix=prefix, connect_timeout_s=120)
    t0 = time.monotonic()
    # the TLS listener closes a plaintext request unanswered, as a broker that is down would: before, the
    # client was told "cannot reach Kafka" once its whole connect timeout had passed
    with pytest.raises(BusRefused, match="requires SASL_SSL authentication") as refused:
        async with EventProducer(plain):
            pass
    assert time.monotonic() - t0 < plain.connect_timeout_s  # not retried until the timeout
    assert "bus.security_protocol" in str(refused.value) and "\n" not in str(refused.value)
    no_credentials = await anyio.run_process(
        [sys.executable, "-m", "cua_stream", "topics", "create", "--bootstrap", bootstrap, "--prefix", prefix],
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("CUA_SECURITY", "CUA_SASL", "CUA_SSL"))},
    )  # fmt: skip
    said = no_credentials.stderr.decode().strip()
    assert no_credentials.returncode == 2 and len(said.splitlines()) == 1, said
    assert "requires SASL_SSL authentication" in said and "bus.security_protocol" in said, said
    other_ca = ensure_tls(tmp_path / "other", "127.0.0.1").ca  # a CA that did not sign the broker
    t0 = time.monotonic()
    with pytest.raises(BusRefused, match="TLS"):
        async with EventProducer(
            secured.bus("reader", prefix, ssl_cafile=str(other_ca), connect_timeout_s=120)
        ):
            pass
    assert time.monotonic() - t0 < 60  # refused at once, not retried for the connect timeout

    async def closed() -> bool:
        return connections_to(secured.broker.config.port) == 0

    with anyio.move_on_after(30):  # the refused connections' transports close (not this test's verdict) ...
        await wait_until(closed, poll_s=0.1)
    gc.collect()  # ... and are collected here, within this test: collected later, in another test, an
    # unclosed one's complaint would fail that test (warnings are errors)


def connections_to(port: int) -> int:
    """This process's TCP sockets connected to ``port`` (Linux: its fds' socket inodes in /proc/net)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if (target := os.readlink(fd)).startswith("socket:["):
                mine.add(target.removeprefix("socket:[").removesuffix("]"))
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            count += int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in mine
    return count


async def test_every_forbidden_operation_is_refused(secured: Secured) -> None:
    """Writes, reads and groups outside each role's grants: every one refused, and no record written.
    Every topic holds one record first (the admin's), so a refused read has something to refuse."""
    prefix = await secured.new_prefix()
    async with EventProducer(secured.bus("admin", prefix)) as admin:
        for spec in ALL:
            await admin.publish(spec, sample(spec))

    def bus(role: str) -> BusConfig:
        return secured.bus(role, prefix, connect_timeout_s=10)

    def publish(role: str, spec: TopicSpec, **options: Any) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            async with EventProducer(bus(role), **options) as p:
                await p.publish(spec, sample(spec))

        return go

    def read(role: str, spec: TopicSpec) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            [_ async for _ in scan(bus(role), spec)]

        return go

    def join(role: str, spec: TopicSpec, group: str) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            async with (
                EventProducer(secured.bus("trainer", prefix)) as dead_letters,  # never used
                EventConsumer(bus(role), [spec], group_id=group, dead_letters=dead_letters) as c,
            ):
                await c.run(_ignore, stop_after=1)

        return go

    attempts: dict[str, list[tuple[str, Callable[[], Awaitable[None]]]]] = {
        "producer": [
            ("write scores", publish("producer", SCORES)),
            ("write policy", publish("producer", POLICY)),
            ("write work", publish("producer", WORK)),
            ("write eval_work", publish("producer", EVAL_WORK)),
            ("write turns", publish("producer", TURNS)),
            ("read scores", read("producer", SCORES)),
            ("join another group", join("producer", WORK, f"{prefix}.other")),
        ],
        "reader": [(f"write {spec.name}", publish("reader", spec)) for spec in ALL]
        + [("join a group", join("reader", TURNS, f"{prefix}.tap"))],
        "gateway": [
            ("write policy", publish("gateway", POLICY)),
            ("write scores", publish("gateway", SCORES)),
            ("write work", publish("gateway", WORK)),
            ("write outcomes", publish("gateway", OUTCOMES)),
            ("read turns", read("gateway", TURNS)),
        ],
        "scorer": [
            ("write policy", publish("scorer", POLICY)),
            ("write turns", publish("scorer", TURNS)),
            ("write work", publish("scorer", WORK)),
            ("read turns", read("scorer", TURNS)),
            ("another transactional id", publish("scorer", SCORES, transactional_id=f"{prefix}.trainer-0")),
            ("the producers' group", join("scorer", OUTCOMES, f"{prefix}.producers")),
        ],
        "evaluator": [
            # training's work: what a training producer plays is the trainer's to write, and only its
            ("write work", publish("evaluator", WORK)),
            ("read work", read("evaluator", WORK)),
            ("write scores", publish("evaluator", SCORES)),
            ("write policy", publish("evaluator", POLICY)),
            ("write outcomes", publish("evaluator", OUTCOMES)),
            ("write train_steps", publish("evaluator", TRAIN_STEPS)),
            ("read turns", read("evaluator", TURNS)),
        ],
        "trainer": [
            ("write outcomes", publish("trainer", OUTCOMES)),
            ("write eval_work", publish("trainer", EVAL_WORK)),
            ("write scores", publish("trainer", SCORES)),
            ("write turns", publish("trainer", TURNS)),
            ("read outcomes", read("trainer", OUTCOMES)),
        ],
    }
    refused: Counter[str] = Counter()
    accepted: list[str] = []
    how: Counter[str] = Counter()
    for role, tries in attempts.items():
        for what, attempt in tries:
            try:
                with anyio.fail_after(30):
                    await attempt()
            except (BusRefused, *AUTHORIZATION_ERRORS) as e:
                refused[role] += 1
                how[type(e).__name__] += 1
            else:
                accepted.append(f"{role}: {what}")
    print(
        "forbidden operations refused, by role:", dict(refused), "how:", dict(how), "accepted:", len(accepted)
    )
    assert accepted == []
    assert refused == {role: len(tries) for role, tries in attempts.items()}
    for spec in ALL:  # nothing landed anywhere but the admin's record (the admin reads every topic)
        assert len([d async for d in scan(secured.bus("admin", prefix), spec)]) == 1, spec.name


def test_the_secured_broker_started_in_time(secured: Secured) -> None:
    print(f"secured broker start: {secured.start_s:.1f}s")
    assert secured.start_s < secured.broker.config.start_timeout_s


EVAL_REQUEST = msgspec.structs.replace(
    SAMPLES["work_request"], run_id="eval-7", group_id="eval-grp-3", episode_id="eval-ep-3-1"
)


def sample(spec: TopicSpec) -> Event:
    return {
        WORK: SAMPLES["work_request"],
        EVAL_WORK: EVAL_REQUEST,
        TURNS: SAMPLES["turn"],
        SUMMARIES: SAMPLES["summary"],
        OUTCOMES: SAMPLES["outcome"],
        SCORES: SAMPLES["score"],
        POLICY: SAMPLES["policy_version"],
        TRAIN_STEPS: SAMPLES["train_step"],
        EVALS: SAMPLES["eval_report"],
        DLQ: SAMPLES["dead_letter"],
    }[spec]


async def _ignore(_: Delivery) -> None:
    return None


def test_the_cli_starts_a_secured_broker_and_grants_the_acls(tmp_path: Path) -> None:
    home, port = tmp_path / "b", broker_port()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "cua_stream", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=os.environ.copy())

    # a home formatted without --secure has no users: refused before anything starts
    (home / "data").mkdir(parents=True)
    (home / "data" / "meta.properties").write_text("formatted elsewhere\n")
    refused = cli("broker", "start", "--secure", "--home", str(home), "--port", str(port))
    assert refused.returncode == 2 and "formatted without --secure" in refused.stderr
    started = cli("broker", "start", "--secure", "--fresh", "--home", str(home), "--port", str(port))
    try:
        assert started.returncode == 0, started.stderr
        assert (
            "SASL_SSL" in started.stdout
            and f"CUA_SASL_PASSWORD_FILE={home}/secrets/trainer.password" in started.stdout
        )
        granted = cli("acl", "apply", "--broker-home", str(home), "--prefix", "cli")
        assert granted.returncode == 0, granted.stderr
        assert f"granted {len(acls('cli'))} ACL(s)" in granted.stdout
    finally:
        stopped = cli("broker", "stop", "--home", str(home))
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
