"""The local broker's setup steps that need no running broker: Java check, jar lock, verified download."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
import yaml

from cua_stream.broker import BrokerConfig, java_version
from cua_stream.broker.jars import Artifact, ensure_jars, locked_versions, read_lock
from cua_stream.config import ConfigError, build
from cua_stream.errors import BrokerError

REPO = Path(__file__).parent.parent.parent


def _fake_java(tmp_path: Path, banner: str) -> str:
    exe = tmp_path / "java"
    exe.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_java_17_plus_is_required(tmp_path: Path) -> None:
    assert java_version(_fake_java(tmp_path, 'openjdk version "17.0.15" 2025-04-15')) == 17
    assert java_version(_fake_java(tmp_path, 'openjdk version "21" 2023-09-19')) == 21
    with pytest.raises(BrokerError, match="Java 17\\+; .* is Java 11"):
        java_version(_fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15'))
    with pytest.raises(BrokerError, match="Java 17\\+; .* is Java 8"):
        java_version(_fake_java(tmp_path, 'java version "1.8.0_402"'))
    with pytest.raises(BrokerError, match="not on PATH"):
        java_version(str(tmp_path / "no-such-java"))


def test_the_pinned_lock_resolves_kafka_and_its_runtime() -> None:
    assert "4.1.1" in locked_versions()
    arts = read_lock("4.1.1")
    names = {a.artifact for a in arts}
    assert {
        "kafka_2.13",
        "kafka-server",
        "kafka-raft",
        "kafka-clients",
        "scala-library",
        "log4j-slf4j-impl",
    } <= names
    assert all(len(a.sha256) == 64 for a in arts)
    with pytest.raises(BrokerError, match="no jar lock for Kafka 9.9.9"):
        read_lock("9.9.9")


def test_download_is_verified_against_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    good = Artifact("org.example", "good", "1.0", hashlib.sha256(b"good jar").hexdigest())
    bad = Artifact("org.example", "bad", "1.0", hashlib.sha256(b"expected").hexdigest())
    for art, body in ((good, b"good jar"), (bad, b"tampered")):
        path = repo / "org" / "example" / art.artifact / "1.0" / art.filename
        path.parent.mkdir(parents=True)
        path.write_bytes(body)
    monkeypatch.setattr("cua_stream.broker.jars.read_lock", lambda v: [good] if v == "good" else [good, bad])
    libs = tmp_path / "libs"
    assert [p.name for p in ensure_jars("good", libs, repo.as_uri())] == ["good-1.0.jar"]
    with pytest.raises(BrokerError, match="does not match the lock"):
        ensure_jars("both", libs, repo.as_uri())
    assert sorted(os.listdir(libs)) == ["good-1.0.jar"]  # nothing unverified was kept
    with pytest.raises(BrokerError, match="cannot download .*Maven Central"):
        ensure_jars("both", tmp_path / "libs2", (tmp_path / "nowhere").as_uri())


def test_broker_config_names_bad_fields() -> None:
    with pytest.raises(ConfigError, match="broker.port"):
        build(BrokerConfig, "broker", overrides={"port": 70000}, env={})
    with pytest.raises(ConfigError, match="broker.heap_mb"):
        build(BrokerConfig, "broker", overrides={"heap_mb": 16}, env={})
    cfg = build(BrokerConfig, "broker", env={"CUA_BROKER_PORT": "19000"})
    assert (cfg.bootstrap_servers, cfg.controller) == ("127.0.0.1:19000", 19001)


def test_compose_file_runs_a_kraft_kafka_matching_the_local_broker() -> None:
    doc = yaml.safe_load((REPO / "compose" / "docker-compose.yml").read_text())
    kafka = doc["services"]["kafka"]
    assert (
        kafka["image"] == f"${{KAFKA_IMAGE:-apache/kafka:{BrokerConfig().kafka_version}}}"
    )  # official by default
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"  # topics come from the registry
    assert "9092:9092" in kafka["ports"]
    topics = doc["services"]["topics"]
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "topics create" in " ".join(topics["command"])
