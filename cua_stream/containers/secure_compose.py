"""The secrets of the secured compose deployment (compose/secure.yml): a directory on the host holding the
broker's TLS material and each role's SCRAM password, made with the secured local broker's own tools
(``cua_stream.broker.tls``, ``cua_stream.broker.users``) and handed to the containers as compose secrets
(files under ``/run/secrets``, read-only, each service only its own), never as environment values.

Layout of ``DIR`` (``CUA_KAFKA_SECRETS``)::

    tls/ca.pem               the CA every client trusts
    tls/broker.pem           the brokers' key and certificate (SANs: kafka, kafka-2, kafka-3, localhost)
    secrets/<role>.password  one per role of ``cua_stream.bus.acl.ROLES``
    secrets/scram-users      the format tool's ``--add-scram`` values, one a line (salted passwords)
"""

from __future__ import annotations

from pathlib import Path

from cua_stream import env_vars
from cua_stream.broker.tls import ensure_tls, tls_files
from cua_stream.broker.users import ensure_passwords, password_file, scram_arguments, write_private
from cua_stream.config import BusConfig

BROKER_HOSTS = ("kafka", "kafka-2", "kafka-3")
"""The brokers' hostnames in the compose network (compose/docker-compose.yml, compose/kafka-3.yml)."""
ENV = env_vars.KAFKA_SECRETS


def scram_users_file(folder: Path) -> Path:
    return folder / "secrets" / "scram-users"


def scram_lines(arguments: list[str]) -> str:
    """``--add-scram X --add-scram Y`` as the lines ``X`` and ``Y`` (what the Kafka image's entrypoint
    reads from ``SCRAM_USERS_FILE``)."""
    pairs = zip(arguments[::2], arguments[1::2], strict=True)
    return "".join(f"{value}\n" for flag, value in pairs if flag == "--add-scram")


def ensure_secrets(folder: Path) -> dict[str, str]:
    """Make (or keep) the CA, the brokers' certificate and each role's password under ``folder``; write
    the SCRAM users file for the next format; return the exports compose/secure.yml needs."""
    folder = folder.resolve()
    ensure_tls(folder, "kafka", also=BROKER_HOSTS[1:])
    write_private(scram_users_file(folder), scram_lines(scram_arguments(ensure_passwords(folder))))
    return {ENV: str(folder)}


def host_bus(folder: Path, role: str, bootstrap: str, prefix: str = "cua") -> BusConfig:
    """A client on the host of the secured compose broker as ``role``."""
    return BusConfig(
        bootstrap_servers=bootstrap,
        topic_prefix=prefix,
        security_protocol="SASL_SSL",
        sasl_username=role,
        sasl_password_file=str(password_file(folder, role)),
        ssl_cafile=str(tls_files(folder).ca),
    )
