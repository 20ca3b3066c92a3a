"""The images a compose deployment runs here, built like the episode images (cached by the hash of what
they are built from; nothing pulled):

- ``cua-kafka:local``: Apache Kafka from the jars the local broker uses (Maven Central, the lock's
  hashes), on Debian's Java 17, configured by ``KAFKA_*`` variables like the official image;
- ``cua-runtime:local``: the libraries a checkout's virtual environment needs; compose/local.yml mounts
  the interpreter and the checkout into it for every cua-stream service, the reference engine and the
  S3 store (moto's server, from the dev dependencies).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from cua_stream.broker.jars import ensure_jars
from cua_stream.broker.local import BrokerConfig
from cua_stream.config import cache_dir
from cua_stream.containers.dockerd import DockerHome
from cua_stream.containers.images import BASE, Built, build_context

KAFKA = "cua-kafka:local"
RUNTIME = "cua-runtime:local"


def _apt_files() -> dict[str, bytes]:
    """The desktop context's Debian sources and slim dpkg settings, shared by every apt-built image."""
    desktop = resources.files("cua_stream.containers").joinpath("contexts", "desktop")
    return {name: desktop.joinpath(name).read_bytes() for name in ("debian.sources", "dpkg-slim.cfg")}


def runtime_context() -> dict[str, bytes]:
    here = resources.files("cua_stream.containers").joinpath("contexts", "runtime")
    return {"Dockerfile": here.joinpath("Dockerfile").read_bytes(), **_apt_files()}


def kafka_context(kafka_version: str = BrokerConfig().kafka_version) -> dict[str, bytes]:
    """The Kafka image's context: its Dockerfile and scripts, and the pinned jars (fetched if missing)."""
    here = resources.files("cua_stream.containers").joinpath("contexts", "kafka")
    files = {
        name: here.joinpath(name).read_bytes()
        for name in ("Dockerfile", "entrypoint.sh", "ready.sh", "log4j2.properties")
    }
    files.update(_apt_files())
    for jar in ensure_jars(kafka_version, cache_dir() / "kafka" / kafka_version / "libs"):
        files[f"libs/{jar.name}"] = jar.read_bytes()
    return files


def build_services(
    home: DockerHome, *, rebuild: bool = False, say: Callable[[str], object] = lambda line: None
) -> list[Built]:
    """The Kafka and runtime images (FROM the base, which must be built)."""
    return [
        build_context(home, KAFKA, kafka_context(), {"BASE": BASE}, rebuild=rebuild, network=True, say=say),
        build_context(
            home, RUNTIME, runtime_context(), {"BASE": BASE}, rebuild=rebuild, network=True, say=say
        ),
    ]
