"""compose/local.yml (the deployment on images built here) covers the whole main file: every service
whose image comes from a registry gets a local image or stays off by default, no GPU is reserved, and
the variables it needs are found from the checkout or refused with the fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cua_stream.containers import app_image, local_compose, service_images
from cua_stream.containers.dockerd import DockerHome
from cua_stream.errors import ContainerEngineError


class _Tags(yaml.SafeLoader):
    """compose's !reset / !override tags, read as the value they carry."""


for _tag in ("!reset", "!override"):
    _Tags.add_constructor(_tag, lambda loader, node: None if node.value in ("null", "", None) else (
        loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else
        loader.construct_mapping(node) if isinstance(node, yaml.MappingNode) else
        loader.construct_scalar(node)))  # fmt: skip

COMPOSE = local_compose.checkout_root() / "compose"


def load(name: str) -> dict[str, Any]:
    return yaml.load((COMPOSE / name).read_text(), Loader=_Tags)  # a SafeLoader subclass


LOCAL_IMAGES = {"${CUA_RUNTIME_IMAGE:-cua-runtime:local}", "${KAFKA_IMAGE:-cua-kafka:local}"}


def test_every_registry_image_is_replaced_or_left_off_and_no_gpu_is_reserved() -> None:
    for base_name, local_name in (("docker-compose.yml", "local.yml"), ("kafka-3.yml", "local-kafka-3.yml")):
        base, local = load(base_name)["services"], load(local_name)["services"]
        for name, service in base.items():
            if "image" not in service:
                continue  # only overrides another file's service
            over = local.get(name, {})
            if over.get("profiles"):
                continue  # off unless asked for
            assert over.get("image") in LOCAL_IMAGES and over.get("pull_policy") == "never", name
            if "deploy" in service:
                assert "deploy" in over and not over["deploy"], name  # the GPU reservation reset
    assert {service_images.KAFKA, service_images.RUNTIME} == {
        i.split(":-")[1].rstrip("}") for i in LOCAL_IMAGES
    }


def test_the_compose_arguments_name_the_files_in_override_order() -> None:
    one = local_compose.compose_args("p", compose_dir=Path("/c"))
    assert one == ["compose", "-p", "p", "-f", "/c/docker-compose.yml", "-f", "/c/local.yml"]
    three = local_compose.compose_args("p", three_nodes=True, compose_dir=Path("/c"))
    files = [three[i + 1] for i, a in enumerate(three) if a == "-f"]
    assert files == ["/c/docker-compose.yml", "/c/kafka-3.yml", "/c/local.yml", "/c/local-kafka-3.yml"]
    assert three[-2:] == ["--env-file", "/c/kafka-3.env"]
    for name in local_compose.THREE_NODES:
        assert (COMPOSE / name).is_file(), name


def test_the_local_environment_is_found_from_the_checkout_or_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ContainerEngineError, match="make-tiny-model"):
        local_compose.local_env(local_compose.checkout_root(), tmp_path, {})
    (tmp_path / "qwen3-vl").mkdir()
    (tmp_path / "qwen3-vl" / "config.json").write_text("{}")
    with pytest.raises(ContainerEngineError, match=r"\.venv is missing.*scripts/setup\.sh"):
        local_compose.local_env(tmp_path, tmp_path, {})
    checkout = tmp_path / "checkout"  # a venv's python links to the interpreter it was made from
    (checkout / ".venv" / "bin").mkdir(parents=True)
    interpreter = Path(sys.executable).resolve()
    (checkout / ".venv" / "bin" / "python").symlink_to(interpreter)
    env = local_compose.local_env(checkout, tmp_path, {"ENGINE_API_KEY": "mine"})
    assert env["CUA_CHECKOUT"] == str(checkout) and env["MODEL_DIR"] == "qwen3-vl"
    assert env["CUA_PYTHON_HOME"] == str(interpreter.parents[1])
    assert "ENGINE_API_KEY" not in env  # a secret already set is kept
    assert set(local_compose.SECRETS) - {"ENGINE_API_KEY"} <= set(env) and len(env["GATEWAY_API_KEY"]) >= 20


def test_the_self_contained_image_replaces_every_cua_stream_service_and_mounts_no_checkout() -> None:
    base, app = load("docker-compose.yml")["services"], load(local_compose.IMAGE)["services"]
    cua_services = {name for name, s in base.items() if str(s.get("image", "")).startswith("${CUA_IMAGE")}
    assert cua_services == set(app) and len(cua_services) == 6
    for name, service in app.items():
        assert service["image"] == "${CUA_IMAGE:-cua-stream:local}" and service["pull_policy"] == "never"
        assert service["entrypoint"] == ["tini", "--", "cua-stream"], name
        assert not any("CUA_CHECKOUT" in v or "CUA_PYTHON_HOME" in v for v in service["volumes"]), name
        assert "cua-state:/var/lib/cua-stream" in service["volumes"], name  # the main file's state volume
    assert app_image.APP == "cua-stream:local"
    args = local_compose.compose_args("p", image=True, compose_dir=Path("/c"))
    assert [args[i + 1] for i, a in enumerate(args) if a == "-f"][-2:] == [
        "/c/local.yml",
        "/c/local-image.yml",
    ]


def test_the_image_carries_the_packages_and_every_installed_distribution_but_the_editable_one(
    tmp_path: Path,
) -> None:
    for rel in ("cua_stream/a.py", "cua_stream/__pycache__/a.cpython-312.pyc", "cua_stream/static/x.js",
                "producers/p.py", "consumers/c.py", "tests/t.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    files = app_image.source_files(tmp_path)
    assert sorted(files) == ["src/consumers/c.py", "src/cua_stream/a.py", "src/cua_stream/static/x.js",
                             "src/producers/p.py"]  # fmt: skip
    site = tmp_path / "site"
    for name in ("torch-2.9.0.dist-info", "cua_stream-0.1.0.dist-info", "aiokafka-0.13.0.dist-info"):
        (site / name).mkdir(parents=True)
    assert app_image.installed(site) == ["aiokafka-0.13.0", "torch-2.9.0"]
    script = app_image.copy_script("/work/x/.venv", "/py")
    assert "rm -rf __editable__.cua_stream-*" in script and "echo /opt/cua-stream > cua-stream.pth" in script


def test_the_docker_producer_mounts_the_daemon_and_the_trials_at_their_host_path(tmp_path: Path) -> None:
    from producers.config import ProducerConfig

    producer = load(local_compose.DOCKER_PRODUCER)["services"]["producer"]
    env = producer["environment"]
    assert env["CUA_PRODUCER_ENVIRONMENT"] == "docker" and producer["privileged"] is False
    field = "CUA_PRODUCER_TRIALS_DIR".removeprefix("CUA_PRODUCER_").lower()
    assert field in ProducerConfig.__struct_fields__
    mounts = {v.rsplit(":ro", 1)[0].split(":")[-1]: v for v in producer["volumes"]}
    assert env["DOCKER_HOST"] == "unix://" + next(t for t in mounts if t.endswith(".sock"))
    assert env["DOCKER_CONFIG"] + "/cli-plugins" in mounts
    trials = next(v for v in producer["volumes"] if v.startswith("${CUA_TRIALS_DIR"))
    source, target = trials.split("}:", 1)
    assert source + "}" == target  # the same path: Harbor's log mounts name it, the daemon resolves it
    args = local_compose.compose_args("p", image=True, docker_producer=True, compose_dir=Path("/c"))
    assert [args[i + 1] for i, a in enumerate(args) if a == "-f"][-2:] == ["/c/local-image.yml",
                                                                           "/c/docker-producer.yml"]  # fmt: skip
    home = DockerHome(tmp_path / "d")
    with pytest.raises(ContainerEngineError, match="containers start"):
        local_compose.docker_producer_env(home, tmp_path / "t", docker_cli="/usr/bin/docker")
    home.compose_plugin.parent.mkdir(parents=True)
    home.compose_plugin.write_text("")
    got = local_compose.docker_producer_env(home, tmp_path / "t", docker_cli=sys.executable)
    assert got["DOCKER_SOCKET"] == str(home.socket) and got["DOCKER_CLI_PLUGINS"] == str(
        home.config / "cli-plugins"
    )
    assert (tmp_path / "t").is_dir() and got["CUA_TRIALS_DIR"] == str((tmp_path / "t").resolve())


def test_kafkas_host_port_is_read_as_compose_reads_it_and_a_held_one_is_seen() -> None:
    import socket

    assert local_compose.kafka_host_port({}) == 9092
    assert local_compose.kafka_host_port({"KAFKA_HOST_PORT": "19092"}) == 19092
    with pytest.raises(ContainerEngineError, match="KAFKA_HOST_PORT='x' is not a TCP port"):
        local_compose.kafka_host_port({"KAFKA_HOST_PORT": "x"})
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not local_compose.host_port_free(port)
    line = local_compose.taken_port_line(port, 4242)
    assert "\n" not in line and "(pid 4242)" in line and "cua-stream broker stop" in line
