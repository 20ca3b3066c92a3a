"""One table of the environment variables (``cua_stream.env_vars``), read against the source (every module
parsed): each variable the code names is in it, the code names each one through the table's constants
(never a fresh literal), and the table lists nothing that nothing names. The config fields' variables
are generated from the settings registry, not written."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from cua_stream import config, docs_reference, env_vars

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("producers", "consumers", "cua_stream")
REGISTRY = "cua_stream/env_vars.py"
WRITTEN = re.compile(r"CUA_[A-Z0-9_]+")
"""A variable's name as code would write it by hand (a whole string, or an f-string's start)."""
MENTIONED = re.compile(r"\bCUA_[A-Z0-9_]*[A-Z0-9]\b")
"""A variable named in text (help, messages, templates); ``CUA_<SECTION>_<FIELD>`` patterns are not names."""
IN_EPISODE = ("cua_stream/tasks/verify.py", "cua_stream/tasks/ready.py", "cua_stream/tasks/server.py")
"""Programs run inside an episode, also from the tasks image, which carries only ``cua_stream.tasks``'
standard-library modules (``containers.images.TASK_MODULES``), not this table: they may write a name by
hand (it must still be in the table)."""
EXEMPT = {
    ("cua_stream/tasks/ready.py", "DISPLAY"): "a program run inside the episode (standard library only) "
    "hands X's own variable on to xdotool; the episode's desktop sets it, no setting of cua-stream does",
}
"""Reads of variables the table need not list, each with why."""
ENVIRON_CALLS = ("environ", "child_env")
"""``cua_stream.config``'s functions that return the process environment (a copy, for ``child_env``)."""


def modules() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(), rel)


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that stand alone as statements (docstrings)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def registry_refs(tree: ast.Module) -> set[str]:
    """The variables a module names through the table: ``env_vars.X`` and ``from ... env_vars import X``."""
    out: set[str] = set()
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "cua_stream.env_vars":
            imported |= {a.asname or a.name for a in node.names}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "env_vars"
        ):
            out.add(getattr(env_vars, node.attr))
        elif isinstance(node, ast.Name) and node.id in imported:
            out.add(getattr(env_vars, node.id))
    return {name for name in out if isinstance(name, str)}


def environ_keys(tree: ast.Module) -> Iterator[ast.expr]:
    """The keys a module reads from the process environment: ``os.environ`` or ``environ()`` /
    ``child_env()``'s mapping, by ``[k]``, ``.get(k)`` or ``k in``."""

    def is_environ(node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "environ":
            return isinstance(node.value, ast.Name) and node.value.id == "os"
        return (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ENVIRON_CALLS
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            yield node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_environ(node.func.value)
            and node.args
        ):
            yield node.args[0]
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            yield node.left


def key_name(key: ast.expr) -> str | None:
    """A key's variable name when the source says it (a literal or a table constant), else None."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    if isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name) and key.value.id == "env_vars":
        return getattr(env_vars, key.attr)
    return None


class Scan:
    """What the source names: by the table's constants, by hand, in text, and read from the environment."""

    def __init__(self) -> None:
        self.refs: Counter[str] = Counter()
        self.by_hand: list[str] = []
        self.mentioned: dict[str, list[str]] = {}
        self.in_code: set[str] = set()
        """Names in strings the code uses (templates, messages): not docstrings."""
        self.read: dict[str, list[str]] = {}
        self.unnamed_reads: list[str] = []
        for rel, tree in modules():
            if rel == REGISTRY:
                continue
            self.refs.update(registry_refs(tree))
            skip = docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if WRITTEN.fullmatch(node.value) and id(node) not in skip and rel not in IN_EPISODE:
                        self.by_hand.append(f"{rel}:{node.lineno} {node.value!r}")
                    for name in MENTIONED.findall(node.value):
                        self.mentioned.setdefault(name, []).append(f"{rel}:{node.lineno}")
                        if id(node) not in skip:
                            self.in_code.add(name)
                elif isinstance(node, ast.JoinedStr) and node.values:
                    first = node.values[0]
                    if isinstance(first, ast.Constant) and re.fullmatch(r"CUA_[A-Z0-9_]*", str(first.value)):
                        self.by_hand.append(f"{rel}:{node.lineno} f-string {first.value!r}...")
            for key in environ_keys(tree):
                name = key_name(key)
                where = f"{rel}:{key.lineno}"
                if name is None:
                    self.unnamed_reads.append(where)
                elif (rel, name) not in EXEMPT:
                    self.read.setdefault(name, []).append(where)


SCAN = Scan()
OWN = {v.name for v in env_vars.VARIABLES}
ALL = {v.name for v in docs_reference.all_variables()}


def test_the_code_names_variables_through_the_table_not_by_hand() -> None:
    assert sum(SCAN.refs.values()) >= 20, SCAN.refs  # the scan sees the constants the code uses
    assert SCAN.by_hand == []


def test_every_variable_the_code_names_or_reads_is_in_the_table() -> None:
    assert len(SCAN.mentioned) >= 10 and len(SCAN.read) >= 5  # the scan sees names, and reads
    unknown = {n: where for n, where in {**SCAN.mentioned, **SCAN.read}.items() if n not in ALL}
    assert unknown == {}, "add them to cua_stream.env_vars (or fix the name)"
    assert set(SCAN.refs) <= ALL


def test_every_read_of_the_environment_says_which_variable() -> None:
    # a key the source does not spell (a parameter, a loop variable) would escape the check above
    assert SCAN.unnamed_reads == []


def test_the_table_lists_nothing_that_nothing_names() -> None:
    named = set(SCAN.refs) | SCAN.in_code
    assert len(OWN) >= 10
    assert sorted(OWN - named) == []


def test_each_name_is_listed_once_and_the_fields_variables_are_generated() -> None:
    variables = docs_reference.all_variables()
    assert [n for n, c in Counter(v.name for v in variables).items() if c > 1] == []
    generated = docs_reference.field_variables()
    expected = {
        name
        for section in config.SECTIONS
        for field in config.section_class(section).__struct_fields__
        if field != "bus"
        for name in config.env_names(section, field)
    }
    assert {v.name for v in generated} == expected
    assert len(expected) > 100
    assert {"CUA_BOOTSTRAP_SERVERS", "CUA_BUS_BOOTSTRAP_SERVERS", "CUA_KAFKA_PASSWORD"} <= expected
    assert all(v.field is not None and v.meaning for v in generated)
    assert all(v.field is None and v.meaning and v.reader and v.default for v in env_vars.VARIABLES)


def test_each_name_of_a_field_in_the_table_sets_the_field() -> None:
    names = [v.name for v in docs_reference.field_variables() if v.field == ("bus", "topic_prefix")]
    assert names == ["CUA_TOPIC_PREFIX", "CUA_BUS_TOPIC_PREFIX"]
    for name in names:
        assert config.build(config.BusConfig, env={name: "elsewhere"}).topic_prefix == "elsewhere"
