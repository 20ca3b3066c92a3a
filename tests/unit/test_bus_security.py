"""The bus's security settings (no broker): the fields, their bad combinations, where the password may come
from, the one function every client takes them from, and each role's ACLs."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from cua_stream.broker.tls import ensure_tls
from cua_stream.broker.users import scram_arguments
from cua_stream.bus.acl import ROLES, acls
from cua_stream.bus.connect import client_security
from cua_stream.config import BusConfig, ConfigError, build
from cua_stream.topics import ALL, Topics


@pytest.fixture
def secrets(tmp_path: Path) -> dict[str, str]:
    password = tmp_path / "trainer.password"
    password.write_text("s3cret-value\n")
    ca = ensure_tls(tmp_path / "broker", "127.0.0.1").ca
    return {
        "security_protocol": "SASL_SSL",
        "sasl_username": "trainer",
        "sasl_password_file": str(password),
        "ssl_cafile": str(ca),
    }


def bus(**fields: Any) -> BusConfig:
    return build(BusConfig, "bus", overrides=fields, env={})


def test_plaintext_is_the_default_and_carries_nothing() -> None:
    assert client_security(BusConfig()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_gives_every_client_scram_and_a_verifying_tls_context(secrets: dict[str, str]) -> None:
    kwargs = client_security(bus(**secrets))
    context = kwargs.pop("ssl_context")
    assert kwargs == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "trainer",
        "sasl_plain_password": "s3cret-value",
    }
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"security_protocol": "SSL"}, "bus.security_protocol"),
        ({"sasl_mechanism": "PLAIN"}, "bus.sasl_mechanism"),
        ({"sasl_username": ""}, "bus.sasl_username"),
        ({"sasl_password_file": ""}, "bus.sasl_password_file"),
        ({"sasl_password_file": "/nonexistent/pw"}, "bus.sasl_password_file"),
        ({"ssl_cafile": "/nonexistent/ca.pem"}, "bus.ssl_cafile"),
        # credentials on a PLAINTEXT bus would never be used: a mistake, refused
        ({"security_protocol": "PLAINTEXT"}, "bus.security_protocol"),
    ],
)
def test_bad_combinations_fail_at_start_naming_the_field(
    secrets: dict[str, str], change: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{field}: "):
        bus(**{**secrets, **change})


def test_an_empty_password_file_is_refused(secrets: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ConfigError, match="^bus.sasl_password_file: .* is empty"):
        bus(**{**secrets, "sasl_password_file": str(empty)})


def test_the_password_comes_from_the_environment_never_a_file_or_flag(secrets: dict[str, str]) -> None:
    env = {f"CUA_{k.upper()}": v for k, v in secrets.items() if k != "sasl_password_file"}
    config = build(BusConfig, "bus", env={**env, "CUA_KAFKA_PASSWORD": "from-env"})
    assert config.password().reveal() == "from-env"
    assert "from-env" not in repr(config) and "from-env" not in str(config.sasl_password)
    # the generic names of other fields do not apply to it
    with pytest.raises(ConfigError, match="^bus.sasl_password_file: SASL_SSL needs a password"):
        build(BusConfig, "bus", env={**env, "CUA_SASL_PASSWORD": "x", "CUA_BUS_SASL_PASSWORD": "x"})
    with pytest.raises(ConfigError, match="^bus.sasl_password: a password is not read from a config file"):
        build(BusConfig, "bus", file_data={"bus": {**secrets, "sasl_password": "in-a-file"}}, env={})
    with pytest.raises(ConfigError, match="^bus.sasl_password: "):
        build(BusConfig, "bus", overrides={**secrets, "sasl_password": "on-argv"}, env={})
    with pytest.raises(ConfigError, match="^bus.sasl_password_file: set together with CUA_KAFKA_PASSWORD"):
        build(BusConfig, "bus", env={**env, "CUA_KAFKA_PASSWORD": "pw"}, overrides=secrets)


def test_each_topic_has_the_writers_the_daemons_need_and_no_others() -> None:
    prefix = "p"
    table = acls(prefix)
    writers: dict[str, set[str]] = {}
    readers: dict[str, set[str]] = {}
    for acl in table:
        if acl.resource == "topic" and acl.pattern == "literal":
            into = writers if acl.operation == "write" else readers
            into.setdefault(acl.name.removeprefix("p."), set()).add(acl.role)
    assert writers == {
        "work": {"trainer"},  # training's work: the evaluator cannot have a training producer play anything
        "eval_work": {"evaluator"},
        "evals": {"evaluator"},
        "policy": {"trainer"},
        "train_steps": {"trainer"},
        "turns": {"gateway"},
        "summaries": {"gateway"},
        "outcomes": {"producer"},
        "scores": {"scorer"},
        "dlq": {"trainer", "producer", "scorer"},
    }
    assert readers == {
        "turns": {"trainer"},
        "summaries": {"trainer"},
        "scores": {"trainer", "scorer", "evaluator"},
        "policy": {"trainer", "producer", "evaluator"},
        "work": {"trainer", "producer"},
        "eval_work": {"producer", "evaluator"},
        "evals": {"evaluator"},
        "train_steps": {"trainer"},
        "dlq": {"trainer"},
        "outcomes": {"scorer", "evaluator"},
    }
    assert all(a.allow and a.name.startswith("p.") for a in table)
    assert {a.role for a in table} == set(ROLES) - {"admin"}  # the admin is a super user: no ACLs
    reader = {(a.resource, a.name, a.pattern, a.operation) for a in table if a.role == "reader"}
    assert reader == {("topic", "p.", "prefixed", "read"), ("group", "p.", "prefixed", "describe")}
    assert {Topics(prefix).name_of(s) for s in ALL} == {f"p.{name}" for name in writers}


def test_the_storage_tool_gets_salted_passwords_only() -> None:
    args = scram_arguments({"admin": "plain-pw", "reader": "other-pw"})
    assert args[0::2] == ["--add-scram", "--add-scram"]
    assert args[1].startswith("SCRAM-SHA-512=[name=admin,iterations=8192,salt=")
    assert "saltedpassword=" in args[1] and not any("-pw" in a for a in args)
