"""A default is written in one place: a field with the same name and the same literal default in two
configuration classes is either one setting written twice (then one class reads the other's, as the
``learn`` and ``chaos`` plans read the trainer's ``TRAINER_DEFAULTS``) or two settings that happen to
agree, listed below with the reason they are apart. Read from the source (nothing imported)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG_NAME = re.compile(r"(Config|Plan|Settings|Params|Rules|Choice|Policy|Request|Topics)$")
"""The configuration classes go by these names (the sections, the plans, the rules views); the records
(events, checkpoints, board rows) do not, and their zeros are not settings."""
UNSET = (None, "")
"""``None`` and ``""`` say "not set" (derive it, or go without): not a value chosen twice."""

SEPARATE: dict[tuple[str, frozenset[str]], str] = {
    ("host", frozenset({"BrokerConfig", "EngineConfig", "GatewayConfig", "DashboardConfig"})):
        "each daemon's own bind address; each is local-only until its operator opens it",
    ("metrics_host", frozenset({"ProducerConfig", "ScorerConfig", "TrainerConfig"})):
        "each daemon's own metrics page, bound apart",
    ("log_level", frozenset({"EngineConfig", "GatewayConfig"})):
        "each server's own logging (uvicorn's level for the gateway, the engine's for its own)",
    ("seed", frozenset({"ChaosConfig", "LearnPlan", "EngineConfig", "SftConfig"})):
        "four different seeds: a fault schedule, a learn run's layouts, the engine's sampling, SFT's order",
    ("secure", frozenset({"ChaosConfig", "BrokerConfig"})):
        "a chaos run's choice for its whole loop (its own broker and every daemon), not the broker command's",
    ("max_new_tokens", frozenset({"ChaosConfig", "DemoPlan"})):
        "two runs that each cap a tiny model's unread replies, for their own reasons",
    ("temperature", frozenset({"SamplingParams", "TrainerConfig", "SftConfig"})):
        "the engine's value for a request that names none, the trainer's sampling, SFT's logprob scale",
    ("top_k", frozenset({"SamplingParams", "TrainerConfig"})):
        "the engine's 'off' for a request that names none; the trainer sends its own in every request",
    ("top_p", frozenset({"SamplingParams", "TrainerConfig"})):
        "the engine's 'off' for a request that names none; the trainer sends its own in every request",
    ("min_p", frozenset({"SamplingParams", "TrainerConfig"})):
        "the engine's 'off' for a request that names none; the trainer sends its own in every request",
    ("max_seq_len", frozenset({"TrainerConfig", "SftConfig"})):
        "SFT (cua-stream sft) and GRPO are separate trainings, each with its own sequence bound",
    ("max_grad_norm", frozenset({"TrainerConfig", "SftConfig"})):
        "SFT (cua-stream sft) and GRPO are separate trainings, each with its own clipping",
}  # fmt: skip


def is_config_class(node: ast.ClassDef) -> bool:
    """A dataclass, msgspec Struct or pydantic model named as a configuration."""
    if not CONFIG_NAME.search(node.name):
        return False
    decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
    return decorated or bool(bases & {"Struct", "BaseModel", "BaseSettings"})


def literal_defaults(node: ast.ClassDef) -> Iterator[tuple[str, object]]:
    """The class-level ``name: type = <literal>`` fields (a default read from elsewhere is not one)."""
    for statement in node.body:
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.value
        ):
            try:
                value = ast.literal_eval(statement.value)
            except ValueError:
                continue
            if value not in UNSET:
                yield statement.target.id, value


def config_classes(*roots: str) -> Iterator[ast.ClassDef]:
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and is_config_class(node):
                    yield node


def written_twice(classes: list[ast.ClassDef]) -> dict[tuple[str, frozenset[str]], object]:
    """(field, the classes) for each field name whose same literal default two or more classes write."""
    where: dict[tuple[str, str], set[str]] = defaultdict(set)
    values: dict[tuple[str, str], object] = {}
    for node in classes:
        for name, value in literal_defaults(node):
            key = (name, f"{type(value).__name__}:{value!r}")
            where[key].add(node.name)
            values[key] = value
    return {
        (name, frozenset(owners)): values[(name, v)] for (name, v), owners in where.items() if len(owners) > 1
    }


def test_no_default_is_written_in_two_classes_unless_they_are_separate_settings() -> None:
    classes = list(config_classes("cua_stream", "producers", "consumers"))
    fields = sum(1 for node in classes for _ in literal_defaults(node))
    assert len(classes) >= 20 and fields >= 150  # the walk found the sections it is about
    assert {"TrainerConfig", "LearnPlan", "DemoPlan", "BusConfig", "Topics", "ScorerConfig"} <= {
        node.name for node in classes
    }
    twice = written_twice(classes)
    unexplained = sorted(f"{name} = {value!r} in {sorted(owners)}" for (name, owners), value in twice.items()
                         if (name, owners) not in SEPARATE)  # fmt: skip
    assert not unexplained, "one setting written twice: read one class's default from the other"
    assert not [key for key in SEPARATE if key not in twice]  # no excuse outlives its pair


def test_the_scan_finds_a_default_written_twice() -> None:
    source = (
        "@dataclass\nclass APlan:\n    group_size: int = 4\n    x: str = ''\n"
        "class BConfig(msgspec.Struct):\n    group_size: int = 4\n    x: str = ''\n"
        "class CConfig(msgspec.Struct):\n    group_size: int = DEFAULTS['group_size']\n"
        "class Event(msgspec.Struct):\n    group_size: int = 4\n"
    )
    classes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and is_config_class(n)]
    assert [n.name for n in classes] == ["APlan", "BConfig", "CConfig"]
    assert written_twice(classes) == {("group_size", frozenset({"APlan", "BConfig"})): 4}
