"""``compose/`` on the images built here (``compose/local.yml``): the variables that override needs, and
the ``docker compose`` arguments for the one-node and three-node files.

compose/local.yml mounts this checkout and the interpreter its ``.venv`` was made from at their own
paths (the venv's scripts and its editable install name them absolutely), so both are found from the
checkout itself rather than asked for.
"""

from __future__ import annotations

import secrets
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from cua_stream import env_vars
from cua_stream.containers.dockerd import DockerHome
from cua_stream.errors import ContainerEngineError

ONE_NODE = ("docker-compose.yml", "local.yml")
THREE_NODES = ("docker-compose.yml", "kafka-3.yml", "local.yml", "local-kafka-3.yml")
IMAGE = "local-image.yml"
"""On top of either: the cua-stream services from the self-contained image (``app_image``)."""
DOCKER_PRODUCER = "docker-producer.yml"
"""On top of either: the producer runs each episode in a container of its own on the daemon, through
Harbor's docker environment (``docker_producer_env`` says what it mounts)."""
SECURE = "secure.yml"
"""On top of either: SASL_SSL brokers with ACLs, each service its own principal (one node only so far)."""
SECRETS = ("MINIO_ROOT_PASSWORD", "ENGINE_API_KEY", "GATEWAY_API_KEY", "GATEWAY_ADMIN_API_KEY",
           "GRAFANA_ADMIN_PASSWORD")  # fmt: skip
"""What the main file requires (``${VAR:?}``); each gets a fresh random value unless already set."""


KAFKA_HOST_PORT = env_vars.KAFKA_HOST_PORT
"""The variable compose/local.yml publishes Kafka's host listener on ``127.0.0.1:`` by (default 9092)."""


def kafka_host_port(present: Mapping[str, str]) -> int:
    """The host port compose/local.yml will publish Kafka on, given the environment ``present``."""
    text = present.get(KAFKA_HOST_PORT) or "9092"
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ContainerEngineError(f"{KAFKA_HOST_PORT}={text!r} is not a TCP port")
    return int(text)


def host_port_free(port: int) -> bool:
    """Whether a listener can take ``127.0.0.1:port`` (as docker's proxy binds it: address reuse on)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def taken_port_line(port: int, local_broker_pid: int) -> str:
    """Why ``docker compose up`` would fail inside with "address already in use" for Kafka's port: a local
    broker listens there (``scripts/demo.sh`` keeps its one for the next command), and what to do."""
    return (f"a local Kafka broker (pid {local_broker_pid}) listens on 127.0.0.1:{port}, where compose "
            f"publishes Kafka: stop it first (cua-stream broker stop), or export {KAFKA_HOST_PORT}=<a free port>")  # fmt: skip


def checkout_root() -> Path:
    """The checkout this package runs from (where ``compose/`` and ``.venv`` are)."""
    return Path(__file__).resolve().parents[2]


def mounts_env(checkout: Path) -> dict[str, str]:
    """CUA_CHECKOUT and CUA_PYTHON_HOME for ``checkout``, whose ``.venv`` must exist."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise ContainerEngineError(
            f"{checkout}/.venv is missing (compose/local.yml mounts it): run bash scripts/setup.sh there"
        )
    return {env_vars.CHECKOUT: str(checkout), env_vars.PYTHON_HOME: str(python.resolve().parents[1])}


def local_env(
    checkout: Path, models: Path, present: Mapping[str, str], model_dir: str = "qwen3-vl"
) -> dict[str, str]:
    """Everything compose/local.yml and the main file need that ``present`` (the environment) lacks:
    the mounts, the models directory (the model in its ``model_dir``), and a random value for each
    secret."""
    if not (models / model_dir / "config.json").exists():
        raise ContainerEngineError(
            f"{models}/{model_dir} holds no model: cua-stream make-tiny-model {models}/{model_dir}"
        )
    wanted = {**mounts_env(checkout), env_vars.MODELS: str(models.resolve()), "MODEL_DIR": model_dir}
    wanted.update({name: secrets.token_urlsafe(18) for name in SECRETS if not present.get(name)})
    return wanted


def docker_producer_env(home: DockerHome, trials: Path, docker_cli: str | None = None) -> dict[str, str]:
    """What compose/docker-producer.yml mounts into the producer for the daemon at ``home``: its socket,
    the docker CLI and the compose plugin's directory, and ``trials`` (made here), which the episode
    containers' log mounts name by their host path."""
    cli = docker_cli or shutil.which("docker")
    if not cli:
        raise ContainerEngineError("the docker CLI is not installed: apt-get install -y docker.io (as root)")
    if not home.compose_plugin.exists():
        raise ContainerEngineError(f"no compose plugin at {home.compose_plugin}: cua-stream containers start")
    trials.mkdir(parents=True, exist_ok=True)
    return {
        "DOCKER_SOCKET": str(home.socket),
        "DOCKER_CLI": str(Path(cli).resolve()),
        "DOCKER_CLI_PLUGINS": str(home.compose_plugin.parent),
        env_vars.TRIALS_DIR: str(trials.resolve()),
    }


def compose_args(
    project: str,
    *,
    three_nodes: bool = False,
    secure: bool = False,
    image: bool = False,
    docker_producer: bool = False,
    compose_dir: Path | None = None,
) -> list[str]:
    """``docker compose`` arguments (before the verb) for the local run of one or three Kafka nodes;
    ``secure``: with compose/secure.yml (``CUA_KAFKA_SECRETS`` from ``secure_compose.ensure_secrets``);
    ``image``: the cua-stream services from ``cua-stream:local`` rather than the mounted checkout;
    ``docker_producer``: episodes in Docker (compose/docker-producer.yml, ``docker_producer_env``)."""
    if secure and three_nodes:
        raise ContainerEngineError("compose/secure.yml secures the one-node file only")
    where = compose_dir or checkout_root() / "compose"
    args = ["compose", "-p", project]
    files = (
        *(THREE_NODES if three_nodes else ONE_NODE),
        *([IMAGE] if image else []),
        *([DOCKER_PRODUCER] if docker_producer else []),
        *([SECURE] if secure else []),
    )
    for name in files:
        args += ["-f", str(where / name)]
    if three_nodes:
        args += ["--env-file", str(where / "kafka-3.env")]
    return args
