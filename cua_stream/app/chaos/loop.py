"""The loop a chaos run drives: its settings (one config file every daemon reads), its credentials, and
its daemons with their ports."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cua_stream.app.chaos.config import ChaosConfig
from cua_stream.app.chaos.daemons import Daemon
from cua_stream.config import BusConfig, env_names
from cua_stream.tasks import TASKS


@dataclass(frozen=True)
class Keys:
    """The run's credentials: the loop runs keyed, as a deployment does (and its admin routes are probed)."""

    gateway: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    gateway_admin: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    engine: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    engine_admin: str = field(default_factory=lambda: secrets.token_urlsafe(18))


DAEMON_ROLES = ("gateway", "producer", "scorer", "trainer")
"""The roles (``cua_stream.bus.acl``) a secured run's daemons take; the engine never reaches the bus."""


def settings(cfg: ChaosConfig, run_id: str, home: Path, model: Path, bus: BusConfig, keys: Keys) -> dict:
    engine_url = f"http://127.0.0.1:{cfg.base_port + 10}"
    gateway_url = f"http://127.0.0.1:{cfg.base_port + 11}"
    blobs = str(home / "blobs")
    fast = cfg.mode == "fast"
    return {
        "bus": shared_bus(bus),
        "gateway": {"model_path": str(model), "engine_url": engine_url, "port": cfg.base_port + 11,
                    "blob_dir": blobs, "api_key": keys.gateway, "admin_api_key": keys.gateway_admin,
                    "engine_api_key": keys.engine},
        "engine": {"port": cfg.base_port + 10, "api_key": keys.engine, "admin_api_key": keys.engine_admin},
        "scorer": {},
        "producer": {
            "gateway_url": gateway_url,
            "gateway_api_key": keys.gateway,
            "environment": "scripted" if fast else "local-desktop",
            "concurrency": cfg.concurrency,
            "max_turns": cfg.turns,
            "desktop_width": cfg.desktop_size if fast else 800,
            "desktop_height": cfg.desktop_size if fast else 600,
            "trials_dir": str(home / "trials"),
            "drain_timeout_s": 60.0,
            "agent_timeout_s": 300.0,
        },
        "trainer": {
            "run_id": run_id,
            "model_path": str(model),
            "tasks": list(TASKS),
            "group_size": cfg.group_size,
            "groups_per_step": cfg.groups_per_step,
            "max_staleness": cfg.max_staleness,
            "max_steps": 0,  # the run stops it: after its steps and the whole schedule, or a soak's time
            "max_new_tokens": cfg.max_new_tokens,
            "temperature": 1.0,
            "lr": 1e-4,
            "group_timeout_s": 600.0,
            "checkpoint_dir": str(home / "trainer"),
            "blob_dir": blobs,
            "engine_url": engine_url,
            "gateway_url": gateway_url,
            "engine_api_key": keys.engine_admin,
            "gateway_api_key": keys.gateway_admin,
        },
    }  # fmt: skip


def shared_bus(bus: BusConfig) -> dict[str, str]:
    """The [bus] section every daemon reads: the broker, the prefix and, secured, how to reach it; never a
    principal or its password (each daemon's own, from its environment: ``principal_env``)."""
    section = {"bootstrap_servers": bus.bootstrap_servers, "topic_prefix": bus.topic_prefix}
    if bus.security_protocol != "PLAINTEXT":
        section |= {"security_protocol": bus.security_protocol, "sasl_mechanism": bus.sasl_mechanism,
                    "ssl_cafile": bus.ssl_cafile}  # fmt: skip
    return section


PRINCIPAL_FIELDS = ("sasl_username", "sasl_password_file")
"""The [bus] fields that name a daemon's principal (``principal_env``)."""


def principal_env(client_bus: Mapping[str, str]) -> dict[str, str]:
    """A daemon's principal as the environment variables its [bus] section reads them from."""
    return {env_names("bus", field)[0]: client_bus[field] for field in PRINCIPAL_FIELDS}


def daemons(
    cfg: ChaosConfig, home: Path, model: Path, config_file: Path,
    principals: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Daemon]:  # fmt: skip
    """The loop's daemons; ``principals``: a secured run's environment per role (gateway, producer,
    scorer, trainer), so each runs as its own principal."""
    c, logs, port = ["--config", str(config_file)], home / "logs", cfg.base_port
    env = principals or {}

    def metrics(p: int) -> str:
        return f"http://127.0.0.1:{p}/metrics"

    daemons = {
        "engine": Daemon("engine", ["engine", str(model), *c], f"http://127.0.0.1:{port + 10}/health",
                         logs / "engine.log"),
        "gateway": Daemon("gateway", ["gateway", *c], f"http://127.0.0.1:{port + 11}/health",
                          logs / "gateway.log", metrics_url=f"http://127.0.0.1:{port + 11}/metrics",
                          env=env.get("gateway")),
        "scorer": Daemon("scorer", ["scorer", *c, "--metrics-port", str(port + 12)], metrics(port + 12),
                         logs / "scorer.log", env=env.get("scorer")),
    }  # fmt: skip
    for i in range(cfg.producers):
        p = port + 20 + i
        daemons[f"producer-{i}"] = Daemon(
            f"producer-{i}",
            ["producer", *c, "--metrics-port", str(p)],
            metrics(p),
            logs / f"producer-{i}.log",
            env=env.get("producer"),
        )
    daemons["trainer"] = Daemon(
        "trainer",
        ["trainer", *c, "--metrics-port", str(port + 13)],
        metrics(port + 13),
        logs / "trainer.log",
        env=env.get("trainer"),
    )
    return daemons


def ports(cfg: ChaosConfig) -> set[int]:
    """Every port the loop listens on: broker (and its controller), engine, gateway, the daemons' metrics."""
    base = cfg.base_port
    return {base, base + 1, base + 10, base + 11, base + 12, base + 13} | {
        base + 20 + i for i in range(cfg.producers)
    }


def ephemeral_clash(ports: set[int], ephemeral: tuple[int, int]) -> int | None:
    """The lowest of ``ports`` inside the kernel's ephemeral range (``ephemeral``, inclusive), if any: the
    daemons are killed and rebind their ports all run long, and meanwhile such a port can be handed to an
    outgoing connection (a Kafka client's retry), so the restarted daemon cannot listen."""
    low, high = ephemeral
    return min((p for p in ports if low <= p <= high), default=None)
