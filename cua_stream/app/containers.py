"""``cua-stream containers``' work beyond one library call: the images a local compose run uses, which of
the project's images are built, and the environment ``compose/local.yml`` needs (refused while the local
broker holds Kafka's host port)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cua_stream.errors import ContainerEngineError

Say = Callable[[str], None]


def compose_images(home: Any, *, rebuild: bool, say: Say) -> list[Any]:
    """Kafka's, the runtime's and the self-contained cua-stream image (with its dependencies' image)."""
    from cua_stream.containers import app_image, service_images

    built = service_images.build_services(home, rebuild=rebuild, say=say)
    return built + app_image.build_app(home, rebuild=rebuild, say=say)


def build_every_image(home: Any, *, rebuild: bool, say: Say) -> list[Any]:
    """The episodes' images (base, desktop, tasks), then a local compose run's."""
    from cua_stream.containers import images

    built_images = images.build_all(home, rebuild=rebuild, say=say)
    return [*built_images, *compose_images(home, rebuild=rebuild, say=say)]


def project_images(home: Any) -> list[tuple[str, bool]]:
    """Each of the project's images and whether it is built."""
    from cua_stream.containers import app_image, images, service_images

    names = (images.BASE, images.DESKTOP, images.TASKS, service_images.KAFKA, service_images.RUNTIME,
             app_image.DEPS, app_image.APP)  # fmt: skip
    return [(name, bool(images.image_label(home, name))) for name in names]


def local_compose_env(models: Path, trials: Path | None) -> dict[str, str]:
    """What ``compose/local.yml`` needs (and with ``trials``, ``compose/docker-producer.yml``)."""
    from cua_stream.config import child_env
    from cua_stream.containers import dockerd, local_compose

    # a local broker on Kafka's host port (the demo's) makes compose fail inside, half started; any other
    # holder is left alone: compose's own Kafka, when this runs again for a stack already up
    port = local_compose.kafka_host_port(child_env())
    if not local_compose.host_port_free(port) and (pid := local_broker_on(port)) is not None:
        raise ContainerEngineError(local_compose.taken_port_line(port, pid))
    values = local_compose.local_env(local_compose.checkout_root(), models, child_env())
    if trials is not None:
        values |= local_compose.docker_producer_env(dockerd.DockerHome.default(), trials)
    return values


def local_broker_on(port: int) -> int | None:
    """The pid of the local broker (``cua-stream broker``, this environment's home) if it listens on
    ``port``."""
    from cua_stream.broker import BrokerConfig, LocalBroker
    from cua_stream.config import build

    status = LocalBroker(build(BrokerConfig)).status()
    return status.pid if status.running and status.bootstrap_servers.endswith(f":{port}") else None
