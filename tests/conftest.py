"""Session-wide test settings and the real-Kafka fixtures.

Offline by construction: no hub downloads, no litellm cost-map fetch. Integration tests share one real
Apache Kafka broker per session: the one named by CUA_TEST_BOOTSTRAP_SERVERS (``.ci/run`` starts it
with ``cua-stream broker start``), or else one this fixture starts from the cached jars on a free port.
Each test gets its own topic prefix, so tests never see each other's records.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import random
import shutil
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from cua_stream.config import BusConfig

HEAVY = ("tests/containers/", "tests/desktop/", "tests/e2e/", "tests/integration/test_chaos.py")
"""The whole-loop and screen tests (Chromium on Xvfb in Docker or in the local desktop's namespaces,
every daemon with its own broker): under ``pytest -n N --dist loadfile`` (``CUA_TEST_WORKERS=N
scripts/test.sh``) they are one unit of work, run one after another on one worker while the others run
the rest. Measured on 2 cores when they were spread over both workers: two screens at once made a
readiness timeout miss, a container count saw the other test's container, and the two chaos runs took
300 s each instead of 100. Kept on one worker, the run took 58.6 min against 55.4 in one process: two
cores are already busy, so scripts/test.sh runs in one process unless asked."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    # xdist's own grouping (--dist loadgroup, xdist_group marks) rewrites node ids through an attribute
    # pytest 9.2 no longer reads, so it groups nothing; the file scheduler's scope function is the
    # documented place to choose the units instead.
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class HeavyTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "heavy" if nodeid.startswith(HEAVY) else super()._split_scope(nodeid)

    return HeavyTogether(config, log)  # type: ignore[arg-type]


def desktop_skip(needs: Mapping[str, Any], *, root: bool, which: Callable[[str], str | None]) -> str | None:
    """Why a test marked ``desktop`` cannot run on this host (None: it can). ``needs``: the mark's keywords.
    By default the whole local desktop, whose per-episode namespaces need root; ``root=False`` with
    ``programs=(...)``: a test that drives only those programs (a bare X server), as any user. A missing
    program of the whole desktop is not a skip: on a root host (CI) the test fails and says which."""
    if needs.get("root", True) and not root:
        return "the local desktop needs root for its per-episode namespaces (CI runs as root)"
    missing = [p for p in needs.get("programs", ()) if which(p) is None]
    return (
        f"needs {', '.join(missing)} (`cua-stream desktop doctor` names their packages)" if missing else None
    )


@pytest.hookimpl(tryfirst=True)  # before any fixture starts a broker or a model for it
def pytest_runtest_setup(item: pytest.Item) -> None:
    # every desktop test skips here, by its mark, rather than each module choosing its own condition
    mark = item.get_closest_marker("desktop")
    if mark is not None and (why := desktop_skip(mark.kwargs, root=os.geteuid() == 0, which=shutil.which)):
        pytest.skip(why)


@pytest.fixture
def anyio_backend() -> str:
    # aiokafka is asyncio-only.
    return "asyncio"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_until(done: Callable[[], Awaitable[bool]], poll_s: float = 0.1) -> None:
    """Poll ``done`` (state outside this process: a broker, a server, a subprocess) until it holds; the
    caller bounds the wait (``anyio.fail_after``)."""
    while True:
        if await done():
            return
        await anyio.sleep(poll_s)


def broker_port() -> int:
    """A free port P (with P + 1 free for the KRaft controller) below the ephemeral range: a client that
    retries while a test broker is down picks its local port from that range, may pick the broker's
    own port and connect to itself, and the broker's restart then finds its port taken."""
    from cua_stream.broker import ephemeral_range

    low = ephemeral_range()[0]
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, min(low, 32000) - 2, 2)
        if all(_bindable(p) for p in (port, port + 1)):
            return port
    raise RuntimeError("no free broker port below the ephemeral range")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a running Apache Kafka broker for this test session."""
    external = os.environ.get("CUA_TEST_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from cua_stream.broker import BrokerConfig, LocalBroker

    port = broker_port()
    home: Path = tmp_path_factory.mktemp("kafka")
    broker = LocalBroker(BrokerConfig(home=str(home), port=port, controller_port=port + 1))
    broker.start()
    try:
        yield broker.config.bootstrap_servers
    finally:
        broker.stop()


async def _create_topics(config: BusConfig) -> None:
    from cua_stream.bus.admin import TopicAdmin

    async with TopicAdmin(config) as admin:
        await admin.create()


@pytest.fixture
def bus_config(kafka_bootstrap: str) -> BusConfig:
    """A BusConfig on the session broker with a fresh topic prefix whose topics all exist."""
    config = BusConfig(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=f"t-{uuid.uuid4().hex[:10]}",
        episode_partitions=2,
        client_id="cua-test",
    )
    anyio.run(_create_topics, config)
    return config
