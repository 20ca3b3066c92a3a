"""The compose files describe a deployment the code agrees with: every cua-stream service runs a real
subcommand with real flags and real settings, the ports and addresses are the code's defaults, services
beyond loopback require their keys, and the three-broker variant is one quorum with three replicas.
(tests/containers/test_compose_up.py starts them; tests/unit/test_compose_local.py checks the local override.)"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import typer
import yaml

from consumers.dashboard.config import DashboardConfig
from consumers.scorer.config import ScorerConfig
from consumers.trainer.config import TrainerConfig
from cua_stream.broker import BrokerConfig
from cua_stream.cli import SUBCOMMANDS
from cua_stream.config import BusConfig
from cua_stream.engine.config import EngineConfig
from cua_stream.gateway.config import GatewayConfig
from cua_stream.tasks import TASKS
from producers.config import ProducerConfig

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose"
CONFIGS: dict[str, type[msgspec.Struct]] = {
    "gateway": GatewayConfig, "producer": ProducerConfig, "scorer": ScorerConfig, "trainer": TrainerConfig,
    "dashboard": DashboardConfig, "engine": EngineConfig,
}  # fmt: skip
VAR = re.compile(r"\$\{(\w+)(?::-([^}]*)|:\?[^}]*)?\}")


def default(cls: type[msgspec.Struct], name: str) -> Any:
    return next(f.default for f in msgspec.structs.fields(cls) if f.name == name)


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / name).read_text())


def resolved(value: str) -> str:
    """A compose value with its variables' defaults (a required variable shows as ``<NAME>``)."""
    return VAR.sub(lambda m: m.group(2) if m.group(2) is not None else f"<{m.group(1)}>", str(value))


def required(value: str) -> bool:
    return bool(re.fullmatch(r"\$\{\w+:\?[^}]*\}", str(value)))


def cua_services(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        n: s for n, s in doc["services"].items() if resolved(s.get("image", "")).startswith("cua-stream:")
    }


def options_of(command: list[str]) -> set[str]:
    """The options the CLI takes for ``command`` (``["scorer", ...]`` or ``["topics", "create", ...]``)."""
    module, attr = SUBCOMMANDS[command[0]].split(":")
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, typer.Typer):  # a noun with verbs
        group = typer.main.get_command(obj)
        cmd = group.commands[command[1]]  # type: ignore[attr-defined]
    else:
        app = typer.Typer()
        app.command(command[0])(obj)
        cmd = typer.main.get_command(app)
    return {opt for p in cmd.params for opt in getattr(p, "opts", ())}


def test_every_cua_service_runs_a_real_command_with_real_flags_and_settings() -> None:
    doc = load("docker-compose.yml")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    services = cua_services(doc)
    assert set(services) == {"topics", "gateway", "producer", "scorer", "trainer", "dashboard"}
    bus_fields = {f.upper() for f in BusConfig.__struct_fields__}
    for name, service in services.items():
        assert (
            resolved(service["image"]) == f"cua-stream:{version}"
            and service["build"]["dockerfile"] == "compose/Dockerfile"
        )
        command = service["command"]
        assert command[0] in SUBCOMMANDS, name
        flags = {a for a in command[1:] if a.startswith("--")}
        assert flags <= options_of(command), (name, flags - options_of(command))
        for key in service["environment"]:
            if not key.startswith("CUA_"):
                continue
            field = key.removeprefix("CUA_")
            if field in bus_fields:
                continue
            section = command[0] if command[0] in CONFIGS else None
            assert section and field.startswith(section.upper() + "_"), (name, key)
            assert field.removeprefix(section.upper() + "_").lower() in CONFIGS[section].__struct_fields__, (
                key
            )
    assert (COMPOSE / "Dockerfile").read_text().count('ENTRYPOINT ["cua-stream"]') == 1


def test_ports_addresses_and_the_blob_store_agree_with_the_code() -> None:
    s = load("docker-compose.yml")["services"]
    env = {n: {k: resolved(v) for k, v in svc.get("environment", {}).items()} for n, svc in s.items()}
    assert resolved(s["kafka"]["image"]) == f"apache/kafka:{BrokerConfig().kafka_version}"
    internal = env["kafka"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
    for name in cua_services(load("docker-compose.yml")):
        assert f"INTERNAL://{env[name]['CUA_BOOTSTRAP_SERVERS']}" in internal, name
    gateway_port, engine_port = (
        default(GatewayConfig, "port"),
        default(EngineConfig, "port"),
    )  # 30000: SGLang's own default
    assert (
        env["gateway"]["CUA_GATEWAY_PORT"] == str(gateway_port)
        and f"{gateway_port}:{gateway_port}" in s["gateway"]["ports"]
    )
    engine = s["engine"]["command"]
    assert engine[engine.index("--port") + 1] == str(engine_port) and "sglang.launch_server" in engine
    engine_url = f"http://engine:{engine_port}"
    assert env["gateway"]["CUA_GATEWAY_ENGINE_URL"] == env["trainer"]["CUA_TRAINER_ENGINE_URL"] == engine_url
    gateway_url = f"http://gateway:{gateway_port}"
    assert (
        env["producer"]["CUA_PRODUCER_GATEWAY_URL"]
        == env["trainer"]["CUA_TRAINER_GATEWAY_URL"]
        == gateway_url
    )
    port = default(DashboardConfig, "port")
    assert env["dashboard"]["CUA_DASHBOARD_PORT"] == str(port) and s["dashboard"]["ports"] == [
        f"127.0.0.1:{port}:{port}"
    ]
    blob_dirs = {env[n][f"CUA_{n.upper()}_BLOB_DIR"] for n in ("gateway", "trainer", "dashboard")}
    assert len(blob_dirs) == 1
    blob = blob_dirs.pop()
    assert blob.startswith("s3://")
    bucket = blob.removeprefix("s3://").split("/")[0]
    assert f"store/{bucket}" in " ".join(s["blobs"]["command"])  # the bucket is created before the gateway
    assert s["gateway"]["depends_on"]["blobs"]["condition"] == "service_completed_successfully"
    tasks = s["trainer"]["command"][s["trainer"]["command"].index("--tasks") + 1].split(",")
    assert tasks == list(TASKS)


def test_services_reachable_beyond_loopback_require_their_keys() -> None:
    s = load("docker-compose.yml")["services"]
    gateway = s["gateway"]["environment"]
    assert gateway["CUA_GATEWAY_HOST"] == "0.0.0.0"
    for key in ("CUA_GATEWAY_API_KEY", "CUA_GATEWAY_ADMIN_API_KEY", "CUA_GATEWAY_ENGINE_API_KEY"):
        assert required(gateway[key]), key
    engine = s["engine"]["command"]
    assert required(engine[engine.index("--api-key") + 1])
    assert required(s["producer"]["environment"]["CUA_PRODUCER_GATEWAY_API_KEY"])
    trainer = s["trainer"]["environment"]
    assert (
        trainer["CUA_TRAINER_GATEWAY_API_KEY"] == gateway["CUA_GATEWAY_ADMIN_API_KEY"]
    )  # drains need the admin key
    assert trainer["CUA_TRAINER_ENGINE_API_KEY"] == gateway["CUA_GATEWAY_ENGINE_API_KEY"]
    assert required(s["minio"]["environment"]["MINIO_ROOT_PASSWORD"])


def test_the_three_broker_variant_is_one_quorum_with_three_replicas() -> None:
    base, three = load("docker-compose.yml"), load("kafka-3.yml")
    nodes = {n: svc for n, svc in three["services"].items() if n.startswith("kafka")}
    assert set(nodes) == {"kafka", "kafka-2", "kafka-3"}
    ids = {svc["environment"]["KAFKA_NODE_ID"] for svc in nodes.values()}
    assert ids == {"1", "2", "3"}
    voters = {
        v.split(":")[0] for v in nodes["kafka"]["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    }
    assert voters == {"1@kafka", "2@kafka-2", "3@kafka-3"}
    for name, svc in nodes.items():
        e = svc["environment"]
        assert (
            e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]
            == e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"]
            == "3"
        )
        assert (
            e["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
            and f"INTERNAL://{name}:19092" in e["KAFKA_ADVERTISED_LISTENERS"]
        )
        if name != "kafka":
            assert svc["image"] == base["services"]["kafka"]["image"]
    env = dict(line.split("=", 1) for line in (COMPOSE / "kafka-3.env").read_text().splitlines()
               if line and not line.startswith("#"))  # fmt: skip
    assert env["KAFKA_BOOTSTRAP"].split(",") == [f"{n}:19092" for n in ("kafka", "kafka-2", "kafka-3")]
    assert env["REPLICATION_FACTOR"] == "3"
    cua_env = base["services"]["scorer"]["environment"]
    assert cua_env["CUA_BOOTSTRAP_SERVERS"] == "${KAFKA_BOOTSTRAP:-kafka:19092}"
    assert cua_env["CUA_REPLICATION_FACTOR"] == "${REPLICATION_FACTOR:-1}"
