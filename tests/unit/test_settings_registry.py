"""One settings registry (``cua_stream.config.SECTIONS``): each config section's class is named there
once; the launcher, the loaders and the CLI take it from there; a section nothing reads is not accepted."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from cua_stream.app import launch
from cua_stream.config import (
    SECTIONS,
    BusConfig,
    ConfigError,
    build,
    field_docs,
    read_file,
    section_class,
    section_of,
)
from tests.unit.test_cli_bad_input import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_each_section_names_a_settings_class_that_names_it_back(section: str) -> None:
    cls = section_class(section)
    config = cls.__struct_config__
    assert issubclass(cls, msgspec.Struct) and config.frozen and config.forbid_unknown_fields, cls
    assert section_of(cls) == section


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_setting_has_help_text(section: str) -> None:
    cls = section_class(section)
    assert len(cls.__struct_fields__) >= 3  # the class's fields were found
    assert [f for f in cls.__struct_fields__ if not field_docs(cls).get(f, "").strip()] == []


def test_a_fields_help_is_the_string_written_under_it() -> None:
    docs = field_docs(BusConfig)
    assert docs["topic_prefix"] == "Namespace of every topic name: ``<prefix>.turns`` (env CUA_TOPIC_PREFIX)."
    assert docs["connect_timeout_s"].startswith("How long a client keeps retrying")
    assert "\n    " not in docs["connect_timeout_s"]  # the indentation of its lines taken out

    class Half(msgspec.Struct):
        said: int = 0
        """Said."""
        unsaid: int = 0

    assert field_docs(Half) == {"said": "Said."}


def test_the_launcher_and_the_loaders_take_their_classes_from_the_registry() -> None:
    assert set(launch.SECTIONS) <= set(SECTIONS)
    resolved = launch.resolve(launch.preset("local-demo"))
    assert {s: set(resolved[s]) for s in launch.SECTIONS} == {
        s: set(section_class(s).__struct_fields__) - {"bus"} for s in launch.SECTIONS
    }
    broker = build(section_class("broker"), file_data={"broker": {"port": 19092}})
    assert broker.port == 19092  # the section found from the class


def test_a_class_outside_the_registry_has_no_section() -> None:
    class Loose(msgspec.Struct):
        x: int = 0

    with pytest.raises(LookupError, match="no section's settings class"):
        section_of(Loose)


def test_no_module_writes_a_registered_class_beside_its_section() -> None:
    """The registry is the one place a section and its class meet: no loader call names both."""
    classes = {path.partition(":")[2] for path in SECTIONS.values()}
    call = re.compile(r"\b(?:build|stage_config)\(\s*(\w+),\s*\"(\w+)\"")
    modules = [
        p for package in ("cua_stream", "consumers", "producers") for p in (ROOT / package).rglob("*.py")
    ]
    assert len(modules) > 100  # the walk found the packages
    offenders = [
        f"{p.relative_to(ROOT)}: {m.group(1)}"
        for p in modules
        for m in call.finditer(p.read_text())
        if m.group(1) in classes
    ]
    assert offenders == []


def test_a_demo_section_nothing_reads_is_refused_like_any_unknown_one(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[demo]\nsteps = 3\n")
    with pytest.raises(
        ConfigError, match=r"unknown section \[demo\]; known: broker, bus, chaos, dashboard, engine"
    ):
        read_file(path)
    code, said = cli("broker", "status", "--config", str(path))
    assert code == 2 and "unknown section [demo]" in said, said
