"""compose/secure.yml and its secrets: every Kafka client of the deployment connects as its own role with
only its own password file, the brokers' listeners for clients are SASL_SSL with the ACL authorizer, and
`cua-stream containers secure-env`'s directory holds what the file names (passwords as files only)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from cua_stream.broker.users import scram_arguments
from cua_stream.bus.acl import ADMIN, ROLES
from cua_stream.containers import local_compose, secure_compose
from cua_stream.errors import ContainerEngineError

COMPOSE = local_compose.checkout_root() / "compose"
ROLE_OF = {"topics": ADMIN, "gateway": "gateway", "producer": "producer", "scorer": "scorer",
           "trainer": "trainer", "dashboard": "reader"}  # fmt: skip


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / name).read_text())


def test_every_kafka_client_of_the_deployment_is_its_own_role_with_only_its_own_password() -> None:
    base, secure = load("docker-compose.yml"), load("secure.yml")
    clients = {n for n, s in base["services"].items() if "CUA_BOOTSTRAP_SERVERS" in s.get("environment", {})}
    assert clients == set(ROLE_OF)
    files = {name: s["file"] for name, s in secure["secrets"].items()}
    for name, role in ROLE_OF.items():
        service = secure["services"][name]
        env = service["environment"]
        assert env["CUA_SASL_USERNAME"] == role and env["CUA_SECURITY_PROTOCOL"] == "SASL_SSL", name
        password = f"kafka-{role}-password"
        assert sorted(service["secrets"]) == sorted(["kafka-ca", password]), name
        assert env["CUA_SASL_PASSWORD_FILE"] == f"/run/secrets/{password}"
        assert files[password].endswith(f"/secrets/{role}.password")
    assert "--acls" in secure["services"]["topics"]["command"]  # the admin grants the roles' ACLs


def test_the_broker_offers_clients_sasl_ssl_only_and_refuses_what_no_acl_grants() -> None:
    kafka = load("secure.yml")["services"]["kafka"]["environment"]
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols == {"HOST": "SASL_SSL", "CLIENT": "SASL_SSL", "BROKER": "SSL", "CONTROLLER": "SSL"}
    assert {listener.split("://")[0] for listener in kafka["KAFKA_LISTENERS"].split(",")} == set(protocols)
    for mutual in ("BROKER", "CONTROLLER"):  # no anonymous principal anywhere
        assert kafka[f"KAFKA_LISTENER_NAME_{mutual}_SSL_CLIENT_AUTH"] == "required"
    assert kafka["KAFKA_SUPER_USERS"].split(";")[0] == f"User:{ADMIN}"
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert not any("password=" in str(v) for v in kafka.values())  # the server side of SCRAM holds none


def test_the_secrets_directory_holds_what_the_file_names_and_is_kept(tmp_path: Path) -> None:
    exports = secure_compose.ensure_secrets(tmp_path / "s")
    folder = Path(exports[secure_compose.ENV])
    for spec in load("secure.yml")["secrets"].values():
        path = Path(spec["file"].replace("${CUA_KAFKA_SECRETS:?run cua-stream containers secure-env --dir DIR}",
                                         str(folder)))  # fmt: skip
        assert path.is_file(), path
        if path.name != "ca.pem":
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    ca = (folder / "tls" / "ca.pem").read_bytes()
    pem = (folder / "tls" / "broker.pem").read_bytes()
    cert = x509.load_pem_x509_certificates(pem[pem.index(b"-----BEGIN CERTIFICATE") :])[0]
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(secure_compose.BROKER_HOSTS) | {"localhost"} <= set(names.get_values_for_type(x509.DNSName))
    users = secure_compose.scram_users_file(folder).read_text().splitlines()
    assert [u.split("name=")[1].split(",")[0] for u in users] == list(ROLES)
    passwords = [(folder / "secrets" / f"{r}.password").read_text().strip() for r in ROLES]
    assert not any(p in "".join(users) for p in passwords)  # salted only
    secure_compose.ensure_secrets(folder)  # again: the same CA and passwords, fresh salts
    assert (folder / "tls" / "ca.pem").read_bytes() == ca
    assert passwords == [(folder / "secrets" / f"{r}.password").read_text().strip() for r in ROLES]


def test_scram_lines_are_the_add_scram_values() -> None:
    args = scram_arguments({"a": "pw-a", "b": "pw-b"})
    lines = secure_compose.scram_lines(args).splitlines()
    assert lines == args[1::2] and all(line.startswith("SCRAM-SHA-512=[name=") for line in lines)


def test_the_secure_file_comes_last_and_only_on_one_node() -> None:
    args = local_compose.compose_args("p", secure=True, compose_dir=Path("/c"))
    assert [args[i + 1] for i, a in enumerate(args) if a == "-f"] == [
        "/c/docker-compose.yml", "/c/local.yml", "/c/secure.yml"]  # fmt: skip
    with pytest.raises(ContainerEngineError, match="one-node"):
        local_compose.compose_args("p", secure=True, three_nodes=True)
