"""Topic registry, configuration and the error policy: pure checks, no broker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cua_stream
from cua_stream import errors
from cua_stream.config import BusConfig, ConfigError, Secret, build, read_file
from cua_stream.errors import POLICY, Action, CuaError, action_for
from cua_stream.topics import ALL, DLQ, SCORES, TURNS, Topics, UnknownTopicError
from cua_stream.topics import POLICY as POLICY_TOPIC


def test_episode_topics_are_co_partitioned_by_group() -> None:
    topics = Topics(prefix="x", episode_partitions=6)
    episode = [s for s in ALL if s.episode_partitioned]
    assert {s.name for s in episode} == {"work", "eval_work", "turns", "summaries", "outcomes", "scores"}
    assert {topics.partitions_of(s) for s in episode} == {6}
    assert {s.key for s in episode} == {"group_id"}


def test_only_latest_state_is_compacted_and_the_episode_log_is_retained() -> None:
    topics = Topics()
    assert [s.name for s in ALL if s.cleanup_policy == "compact"] == ["policy"]
    assert topics.configs_of(POLICY_TOPIC)["cleanup.policy"] == "compact"
    assert topics.configs_of(TURNS) == {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}


def test_names_resolve_under_the_prefix() -> None:
    topics = Topics(prefix="run42")
    assert topics.name_of(SCORES) == "run42.scores"
    assert topics.resolve("scores") is SCORES and topics.resolve("run42.scores") is SCORES
    assert topics.spec_of_qualified("run42.dlq") is DLQ and topics.spec_of_qualified("other.dlq") is None
    with pytest.raises(UnknownTopicError, match=r"known topics: run42\.work"):
        topics.resolve("rewards")
    with pytest.raises(ValueError, match="prefix"):
        Topics(prefix="bad prefix")


def test_topic_name_literals_live_in_topics_py_only() -> None:
    """Principle 2: no other module spells a topic name."""
    root = Path(cua_stream.__file__).parent
    names = "|".join(s.name for s in ALL)
    pattern = re.compile(rf"""["'](cua\.)?({names})["']""")
    offenders = [
        f"{p}:{i}"
        for p in root.rglob("*.py")
        if p.name != "topics.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line) and "noqa: topic-name" not in line
    ]
    assert offenders == []


def test_config_precedence_file_env_overrides() -> None:
    file_data = {"bus": {"bootstrap_servers": "file:1", "topic_prefix": "f", "episode_partitions": 2}}
    env = {"CUA_BOOTSTRAP_SERVERS": "env:2", "CUA_BUS_EPISODE_PARTITIONS": "3"}
    cfg = build(
        BusConfig, "bus", file_data=file_data, env=env, overrides={"topic_prefix": "cli", "client_id": None}
    )
    assert (cfg.bootstrap_servers, cfg.topic_prefix, cfg.episode_partitions) == ("env:2", "cli", 3)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"episode_partitions": "many"}, "bus.episode_partitions: Expected `int`"),
        ({"bootstrap_servers": "localhost"}, "bus.bootstrap_servers: expected host:port"),
        ({"bootstrap_sever": "h:1"}, "bus.bootstrap_sever: unknown field"),
        ({"topic_prefix": "a b"}, "bus.topic_prefix"),
    ],
)
def test_bad_config_names_the_field(override: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(BusConfig, "bus", overrides=override, env={})


def test_config_files_toml_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[bus]\nbootstrap_servers = "t:1"\n')
    (tmp_path / "c.yaml").write_text("bus:\n  bootstrap_servers: y:2\n")
    assert (
        build(BusConfig, "bus", file_data=read_file(tmp_path / "c.toml"), env={}).bootstrap_servers == "t:1"
    )
    assert (
        build(BusConfig, "bus", file_data=read_file(tmp_path / "c.yaml"), env={}).bootstrap_servers == "y:2"
    )
    (tmp_path / "bad.toml").write_text("[bus\n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        read_file(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        read_file(tmp_path / "missing.toml")


def test_secret_never_shows_its_value() -> None:
    key = Secret("sk-live-123")
    assert "sk-live" not in repr(key) and "sk-live" not in str(key) and "sk-live" not in f"{key}"
    assert key.reveal() == "sk-live-123"


def test_every_error_class_is_in_the_policy_table() -> None:
    """Principle 7: walk the hierarchy (with every module of the package imported, so classes defined
    anywhere are found); every class lives in errors.py, has a docstring and a row."""
    import importlib
    import pkgutil

    import consumers
    import cua_stream
    import producers
    from consumers.trainer.backends import megatron

    # megatron's modules run in megatron-bridge's venv by their file: they import nothing of ours, and
    # their own imports (megatron_cpu from the worker's folder) do not resolve in this one
    other_venv = f"{megatron.__name__}."
    for package in (cua_stream, consumers, producers):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not info.name.endswith("__main__") and not info.name.startswith(other_venv):
                importlib.import_module(info.name)
    seen: list[type] = []
    stack: list[type] = [CuaError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    assert set(POLICY) == {c for c in seen if not c.__module__.startswith("tests.")}
    for cls in seen:
        if cls.__module__.startswith("tests."):
            continue
        assert cls.__module__ == errors.__name__, f"{cls} is defined outside the one hierarchy"
        assert cls in POLICY, cls
        assert cls.__doc__, cls
    # the errors other modules raise are the hierarchy's own
    from cua_stream.config import ConfigError
    from cua_stream.engine.params import SamplingError
    from cua_stream.gateway.engine_client import EngineUnavailable
    from cua_stream.gateway.refusal import Refusal
    from cua_stream.topics import UnknownTopicError

    for cls in (ConfigError, SamplingError, EngineUnavailable, Refusal, UnknownTopicError):
        assert issubclass(cls, CuaError) and cls in POLICY
    assert action_for(errors.UnknownSchema("x")) is Action.DEAD_LETTER
    assert action_for(errors.BusUnavailable("x")) is Action.RETRY
    assert action_for(KeyError("not ours")) is Action.CRASH
