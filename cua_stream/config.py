"""Configuration: how every daemon's frozen config is loaded (file < environment < flags), validated at
start with the field named in every error; ``BusConfig`` (the ``[bus]`` section) and the section names.
Each daemon's own config struct lives with the daemon (``cua_stream.app.launch.CONFIG_SECTIONS`` lists them).

This is the only module that reads ``os.environ``. Config files (TOML or YAML) refuse unknown keys, so a
typo fails at start instead of being silently ignored. Environment variables override file values;
command-line flags override both (the CLI passes them as ``overrides``).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import itertools
import os
import re
import textwrap
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec
import platformdirs
import yaml

from cua_stream import env_vars
from cua_stream.errors import ConfigError
from cua_stream.topics import Topics

__all__ = [
    "SECTIONS",
    "BusConfig",
    "ConfigError",
    "Secret",
    "build",
    "bus_config",
    "env_names",
    "field_docs",
    "read_file",
    "section_class",
]

ENV_PREFIX = "CUA_"
SECTIONS: Mapping[str, str] = MappingProxyType(
    {
        "bus": "cua_stream.config:BusConfig",
        "broker": "cua_stream.broker.local:BrokerConfig",
        "engine": "cua_stream.engine.config:EngineConfig",
        "gateway": "cua_stream.gateway.config:GatewayConfig",
        "producer": "producers.config:ProducerConfig",
        "scorer": "consumers.scorer.config:ScorerConfig",
        "trainer": "consumers.trainer.config:TrainerConfig",
        "sft": "consumers.trainer.sft.demonstrations:SftConfig",
        "chaos": "cua_stream.app.chaos.config:ChaosConfig",
        "dashboard": "consumers.dashboard.config:DashboardConfig",
    }
)
"""The settings registry: each section a config file may have, with the class that holds its settings
(``module:Class``), written here only. Names, not imports: this module sits below the daemons it
configures; ``section_class`` imports a section's class, ``section_of`` names a class's section."""


def section_class(section: str) -> type[msgspec.Struct]:
    """The settings class of ``section`` (imported on demand)."""
    module, _, name = SECTIONS[section].partition(":")
    return getattr(importlib.import_module(module), name)


def section_of(cls: type) -> str:
    """The section whose settings ``cls`` holds (a class outside the registry is a programming error)."""
    path = f"{cls.__module__}:{cls.__qualname__}"
    for section, registered in SECTIONS.items():
        if registered == path:
            return section
    raise LookupError(f"{path} is no section's settings class (cua_stream.config.SECTIONS)")


def field_docs(cls: type[msgspec.Struct]) -> dict[str, str]:
    """Each field's help text, read from the class's source: the string written under the field (its
    attribute docstring), the one place a setting is described. A field without one is left out."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(body, ast.ClassDef), cls
    docs: dict[str, str] = {}
    for field, after in itertools.pairwise(body.body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


class Secret(str):
    """A string that never shows its value in repr/str (API keys, tokens)."""

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def reveal(self) -> str:
        return str.__str__(self)


class BusConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a process reaches Kafka and which topic namespace it uses."""

    bootstrap_servers: str = "127.0.0.1:9092"
    """Comma-separated host:port list (env CUA_BOOTSTRAP_SERVERS)."""
    topic_prefix: str = Topics.prefix
    """Namespace of every topic name: ``<prefix>.turns`` (env CUA_TOPIC_PREFIX)."""
    episode_partitions: int = Topics.episode_partitions
    """Partitions of each episode topic; the same for all so groups co-partition."""
    replication_factor: int = Topics.replication_factor
    """Copies of each topic's partitions the brokers keep (1: one broker, no copy)."""
    client_id: str = "cua-stream"
    """The name this process's Kafka clients give the brokers (their logs and quotas show it)."""
    request_timeout_ms: int = 30_000
    """How long a client waits for a broker's answer to one request."""
    connect_timeout_s: float = 30.0
    """How long a client keeps retrying (with backoff) to reach the brokers at start before giving up
    with a one-line error."""
    security_protocol: str = "PLAINTEXT"
    """PLAINTEXT (no authentication: a local dev broker) or SASL_SSL (env CUA_SECURITY_PROTOCOL)."""
    sasl_mechanism: str = "SCRAM-SHA-512"
    """SCRAM-SHA-512 or SCRAM-SHA-256 (SASL_SSL only)."""
    sasl_username: str = ""
    """The principal this process runs as (``User:<name>``; env CUA_SASL_USERNAME)."""
    sasl_password_file: str = ""
    """A file holding the password (its first line; env CUA_SASL_PASSWORD_FILE)."""
    sasl_password: Secret = Secret("")
    """The password itself: from env CUA_KAFKA_PASSWORD only (never a flag, never a config file)."""
    ssl_cafile: str = ""
    """The CA certificate(s) to trust for the brokers' TLS (PEM); empty: the system's trust store."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)*", self.bootstrap_servers):
            raise ConfigError(
                f"bus.bootstrap_servers: expected host:port[,host:port...], got {self.bootstrap_servers!r}"
            )
        if self.connect_timeout_s < 0:
            raise ConfigError("bus.connect_timeout_s: must be >= 0")
        try:
            self.topics()
        except ValueError as e:
            raise ConfigError(f"bus.topic_prefix / partitions: {e}") from None
        self._check_security()

    def _check_security(self) -> None:
        """A bad combination of the security fields fails at start, naming the field."""
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"bus.security_protocol: expected one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        if self.security_protocol == "PLAINTEXT":
            # Credentials set for a PLAINTEXT bus are a mistake (they would never be used), not a default.
            for name in ("sasl_username", "sasl_password_file", "sasl_password", "ssl_cafile"):
                if getattr(self, name):
                    shown = env_vars.KAFKA_PASSWORD if name == "sasl_password" else f"bus.{name}"
                    raise ConfigError(
                        f"bus.security_protocol: PLAINTEXT, yet {shown} is set: it would never be used "
                        "(set bus.security_protocol = SASL_SSL, or unset it)"
                    )
            return
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"bus.sasl_mechanism: expected one of {', '.join(SASL_MECHANISMS)}, got {self.sasl_mechanism!r}"
            )
        if not self.sasl_username:
            raise ConfigError("bus.sasl_username: required with security_protocol SASL_SSL")
        if self.sasl_password and self.sasl_password_file:
            raise ConfigError("bus.sasl_password_file: set together with CUA_KAFKA_PASSWORD; keep one")
        if not (self.sasl_password or self.sasl_password_file):
            raise ConfigError(
                "bus.sasl_password_file: SASL_SSL needs a password: set bus.sasl_password_file "
                "or the environment variable CUA_KAFKA_PASSWORD"
            )
        if self.sasl_password_file:
            self.password()  # readable and not empty, now rather than at the first connection
        if self.ssl_cafile and not Path(self.ssl_cafile).is_file():
            raise ConfigError(f"bus.ssl_cafile: {self.ssl_cafile!r} is not a file")

    def password(self) -> Secret:
        """The SASL password: ``sasl_password`` (from CUA_KAFKA_PASSWORD), else the first line of
        ``sasl_password_file`` (read each time: a rotated file is picked up by the next client)."""
        if self.sasl_password:
            return self.sasl_password
        try:
            lines = Path(self.sasl_password_file).read_text().splitlines()
        except OSError as e:
            raise ConfigError(f"bus.sasl_password_file: {self.sasl_password_file}: {e.strerror}") from None
        if not lines or not lines[0]:
            raise ConfigError(f"bus.sasl_password_file: {self.sasl_password_file} is empty")
        return Secret(lines[0])

    def topics(self) -> Topics:
        return Topics(
            prefix=self.topic_prefix,
            episode_partitions=self.episode_partitions,
            replication_factor=self.replication_factor,
        )


SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
ENV_NAMES: dict[tuple[str, str], tuple[str, ...]] = {("bus", "sasl_password"): (env_vars.KAFKA_PASSWORD,)}
"""Fields read from other environment variables than ``CUA_[<SECTION>_]<FIELD>``."""
FILE_REFUSED: dict[tuple[str, str], str] = {
    ("bus", "sasl_password"): "a password is not read from a config file or a flag: use "
    "bus.sasl_password_file or the environment variable CUA_KAFKA_PASSWORD",
}
"""Fields that only the environment may set, with why."""


def require_model_dir(field: str, path: str) -> None:
    """ConfigError naming ``field`` unless ``path`` is a saved model directory (a ``config.json`` in it):
    models load from disk only, never from a hub, and a typo should not surface as a hub error."""
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(f"{field}: {path!r} is not a model directory (no config.json in it)")


def state_dir() -> Path:
    """Where long-lived local state goes (broker data, blobs): env CUA_HOME, else the user state dir."""
    return Path(os.environ.get(env_vars.HOME) or platformdirs.user_state_dir("cua-stream"))


def cache_dir() -> Path:
    """Where downloads are cached (Kafka jars): env CUA_CACHE_DIR, else the user cache dir."""
    return Path(os.environ.get(env_vars.CACHE_DIR) or platformdirs.user_cache_dir("cua-stream"))


def docker_dir() -> Path:
    """Where cua-stream's private Docker daemon keeps its data: env CUA_DOCKER_HOME, else under
    ``state_dir()``."""
    return Path(os.environ.get(env_vars.DOCKER_HOME) or state_dir() / "docker")


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this process's, with ``extra`` on top."""
    return {**os.environ, **extra}


def export_env(values: Mapping[str, str]) -> None:
    """Set ``values`` in this process's environment, for the programs it starts from now on (the docker
    client Harbor runs, say)."""
    os.environ.update(values)


def log_level() -> int:
    """Logging level from CUA_LOG_LEVEL (name or number); WARNING by default."""
    import logging

    value = os.environ.get(env_vars.LOG_LEVEL, "WARNING")
    level = logging.getLevelName(value.upper()) if not value.isdigit() else int(value)
    if not isinstance(level, int):
        raise ConfigError(f"CUA_LOG_LEVEL: unknown level {value!r}")
    return level


OFFLINE_DEFAULTS = {env_vars.LITELLM_COST_MAP: "True"}
"""Set for every command unless the user set them: LiteLLM fetches its model cost map from the internet
when it is imported (Harbor imports it), which costs ~8 s and four warnings wherever that is blocked; the
policy is our own served model, whose cost nobody looks up."""


def apply_offline_defaults() -> None:
    """Put ``OFFLINE_DEFAULTS`` in the environment (before LiteLLM is imported); a value set wins."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)


def environ() -> Mapping[str, str]:
    """The process environment, for pure parsers that take a mapping (e.g. the Harbor binding)."""
    return os.environ


def env_names(section: str, field: str) -> tuple[str, ...]:
    """The environment variables that set ``section.field``, the first found winning: ``CUA_<FIELD>`` then
    ``CUA_BUS_<FIELD>`` for the bus, ``CUA_<SECTION>_<FIELD>`` for the others, or ``ENV_NAMES``' own."""
    if (section, field) in ENV_NAMES:
        return ENV_NAMES[(section, field)]
    names = (f"{ENV_PREFIX}{section.upper()}_{field.upper()}",)
    return (f"{ENV_PREFIX}{field.upper()}", *names) if section == "bus" else names


def _env_overrides(section: str, cls: type[msgspec.Struct], env: Mapping[str, str]) -> dict[str, Any]:
    """The environment's values (``env_names``) for the fields of ``cls``."""
    out: dict[str, Any] = {}
    for field in cls.__struct_fields__:
        for name in env_names(section, field):
            if name in env:
                out[field] = env[name]
                break
    return out


def read_file(path: Path) -> dict[str, Any]:
    """A TOML or YAML config file as a dict (sections are top-level tables)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"config file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a table at the top level")
    for section, body in data.items():
        if section not in SECTIONS:
            near = difflib.get_close_matches(section, SECTIONS, n=1)
            hint = f"did you mean [{near[0]}]? " if near else ""
            raise ConfigError(
                f"config file {path}: unknown section [{section}]; {hint}known: {', '.join(sorted(SECTIONS))}"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"config file {path}: [{section}] must be a table of settings")
    return data


def build[T: msgspec.Struct](
    cls: type[T],
    section: str | None = None,
    *,
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> T:
    """Build config ``cls`` from file section < environment < overrides; errors name ``section.field``.
    ``section``: by default ``cls``'s in the registry; named for a view of another's (the trainer's rules)."""
    section = section or section_of(cls)
    merged: dict[str, Any] = dict((file_data or {}).get(section, {}) or {})
    for (where, field), why in FILE_REFUSED.items():
        if where == section and (field in merged or (overrides or {}).get(field) is not None):
            raise ConfigError(f"{section}.{field}: {why}")
    merged.update(_env_overrides(section, cls, os.environ if env is None else env))
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return convert(cls, section, merged)


def convert[T: msgspec.Struct](cls: type[T], section: str, values: Mapping[str, Any]) -> T:
    """``values`` as config ``cls`` (strings coerced, secrets wrapped); errors name ``section.field``."""
    try:
        return msgspec.convert(values, cls, strict=False, dec_hook=_dec_hook)
    except msgspec.ValidationError as e:
        raise ConfigError(_name_field(section, str(e))) from None


def _dec_hook(typ: type, obj: Any) -> Any:
    # msgspec does not build str subclasses by itself; config fields typed ``Secret`` need this.
    if typ is Secret and isinstance(obj, str):
        return Secret(obj)
    raise TypeError(f"cannot build {typ.__name__} from {type(obj).__name__}")


def _name_field(section: str, message: str) -> str:
    """Rewrite msgspec's "Expected `int`, got `str` - at `$.x`" as "section.x: Expected `int`, got `str`"."""
    if m := re.fullmatch(r"Object contains unknown field `(.+)`(?: - at `\$\.?(.*)`)?", message):
        where = ".".join(p for p in (section, m.group(2), m.group(1)) if p)
        return f"{where}: unknown field (check the spelling)"
    if m := re.search(r" - at `\$\.?(.*)`$", message):
        return f"{section}.{m.group(1)}: {message[: m.start()]}"
    return message if message.startswith(f"{section}.") else f"{section}: {message}"


def bus_config(
    overrides: Mapping[str, Any] | None = None, file_data: Mapping[str, Any] | None = None
) -> BusConfig:
    return build(BusConfig, file_data=file_data, overrides=overrides)


def stage_config[T: msgspec.Struct](
    cls: type[T],
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    bus_overrides: Mapping[str, Any] | None = None,
) -> T:
    """A daemon's section (``cls``'s in the registry; file < env < overrides) with the ``[bus]`` section as
    its ``bus`` field: the one loader every stage's config goes through (bus settings inside the section
    are refused)."""
    section = section_of(cls)
    if file_data and "bus" in (file_data.get(section) or {}):
        raise ConfigError(f"{section}.bus: put bus settings in the [bus] section")
    built = build(cls, section, file_data=file_data, overrides=overrides)
    return msgspec.structs.replace(built, bus=bus_config(bus_overrides, file_data))  # type: ignore[call-arg]
