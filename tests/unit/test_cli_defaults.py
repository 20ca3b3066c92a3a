"""`--help`'s defaults come from the config fields the options feed (``cua_stream.cli.defaults``): each
mapped option shows its field's default, read from the settings class in the registry; no help text
restates by hand a default that a field owns; and a field's default changed is a changed `--help`. The
same for `learn`, whose defaults are its plan's (``cua_stream.app.learn.plan.LearnPlan``)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import typing
from collections.abc import Iterator
from typing import Annotated, Any

import msgspec
import pytest
import typer
from typer.testing import CliRunner

from cua_stream import cli, config
from cua_stream.app.learn.plan import LearnPlan
from cua_stream.cli.defaults import FieldOption, PlanOption, field_option, plan_option, shown_default
from cua_stream.docs_reference import commands

HAND_WRITTEN = {
    "eval run --model-path": "the demo's tiny model: no config field",
    "eval run --run-id": "a time-stamped id made by the command",
    "eval run --out": "a path made from the state directory and the run id",
    "eval follow --model-path": "the demo's tiny model: no config field",
    "eval follow --run-id": "made from the followed run's id",
    "eval follow --out": "a path made from the state directory and the run id",
    "eval table --out": "a path made from the first results file",
    "learn --demo-tasks": "another option's value",
    "record-oracle --model-path": "the demo's tiny model: no config field",
    "record-oracle --run-id": "a time-stamped id made by the command",
    "retrain --steps": "a range, all of it: no field",
    "retrain --start": "the source run's record, not a field",
    "retrain --batches-from": "another option's value",
    "retrain --checkpoint-dir": "the new run's id inside the state directory",
    "runs compare --steps": "a range, all of it: no field",
    "tap TOPICS": "every topic: no field",
    "inspect step --model": "another section's field if it is a directory here",
    "inspect episode --model": "another section's field if it is a directory here",
    "inspect step --blob-dir": "the recompute's, read from the trainer section",
    "broker lock --output": "next to the other locks: no field",
    "launch --preset": "'default' is a preset's name here",
}
"""Options whose help says what happens when they are not given, with no config field to read it from."""


def click_root() -> Any:
    return typer.main.get_command(cli.full_app())


def mapped_options() -> Iterator[tuple[str, Any, FieldOption]]:
    """(command path, click parameter, its FieldOption) for every option that feeds a config field."""
    for path, command in commands(click_root()):
        if command.callback is None:
            continue
        hints = typing.get_type_hints(inspect.unwrap(command.callback), include_extras=True)
        for param in command.params:
            hint = hints.get(param.name)
            for info in getattr(hint, "__metadata__", ()):
                if isinstance(info, FieldOption):
                    yield " ".join(path), param, info


def field_default_text(section: str, field: str) -> str | None:
    """The field's default as a reader expects it, computed here from the class (not by _defaults)."""
    (info,) = [f for f in msgspec.structs.fields(config.section_class(section)) if f.name == field]
    value = info.default_factory() if info.default_factory is not msgspec.NODEFAULT else info.default
    if value in (msgspec.NODEFAULT, None, "", [], {}):
        return None
    return {True: "true", False: "false"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def test_each_mapped_option_shows_its_fields_default() -> None:
    found = list(mapped_options())
    commands_mapped = {path for path, _, _ in found}
    assert (
        len(found) >= 60
        and {"trainer", "producer", "chaos", "engine", "sft", "broker start"} <= commands_mapped
    )
    for path, param, info in found:
        want = field_default_text(info.section, info.field)
        shown = param.show_default if isinstance(param.show_default, str) else None
        assert shown == want, (
            f"{path} {param.opts[0]}: shows {shown!r}, [{info.section}] {info.field} is {want!r}"
        )


def test_the_help_shows_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    done = CliRunner().invoke(cli.full_app(), ["trainer", "--help"])
    assert done.exit_code == 0, done.output
    group_size = next(line for line in done.output.splitlines() if "--group-size" in line)
    assert "[default: (4)]" in group_size  # TrainerConfig.group_size


def test_no_help_restates_a_default_by_hand() -> None:
    mapped = {(path, param.name) for path, param, _ in mapped_options()}
    stated = []
    for path, command in commands(click_root()):
        for param in command.params:
            name = param.opts[0] if param.opts[0].startswith("-") else param.name.upper()
            key = f"{' '.join(path)} {name}"
            if re.search(r"\bdefault\b", param.help or "", re.IGNORECASE) and key not in HAND_WRITTEN:
                stated.append(key)
            if (" ".join(path), param.name) in mapped:
                assert "default" not in (param.help or "").lower(), f"{key}: its field's default is shown"
    assert stated == [], "help restating a default: map the option to its field (field_option) instead"
    assert set(HAND_WRITTEN) <= {
        f"{' '.join(p)} {q.opts[0] if q.opts[0].startswith('-') else q.name.upper()}"
        for p, c in commands(click_root())
        for q in c.params
    }, "an option listed in HAND_WRITTEN is gone"


class Mutant(msgspec.Struct, frozen=True, kw_only=True):
    group_size: int = 5


def test_a_changed_field_default_changes_the_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's group_size default changed (a mutant of its class in the registry): the option,
    made again, shows the new default."""

    def make() -> typer.Typer:
        app = typer.Typer()

        @app.command()
        def trainer(
            group_size: Annotated[
                int | None, field_option("trainer", "group_size", help="Per group.")
            ] = None,
        ) -> None:
            """A stand-in."""

        return app

    def shown() -> str:
        out = CliRunner().invoke(make(), ["--help"], env={"COLUMNS": "200"}).output
        return next(line for line in out.splitlines() if "--group-size" in line)

    assert "[default: (4)]" in shown()
    real = config.section_class
    monkeypatch.setattr(config, "section_class", lambda s: Mutant if s == "trainer" else real(s))
    assert "[default: (5)]" in shown()


def test_an_option_naming_no_field_fails_at_import() -> None:
    with pytest.raises(KeyError, match="no field 'group_sise'"):
        field_option("trainer", "group_sise", help="A typo.")


@pytest.mark.parametrize(
    ("value", "text"),
    [(4, "4"), (1e-4, "0.0001"), (True, "true"), ("drop_group", "drop_group"), (["a", "b"], "a,b"),
     (None, None), ("", None), ([], None), (msgspec.NODEFAULT, None)],
)  # fmt: skip
def test_shown_default(value: object, text: str | None) -> None:
    assert shown_default(value) == text


LEARN_OWN = {"engine_port", "gateway_port", "policies_port", "config"}
"""``learn``'s options that set no field of its plan (where its servers listen, the config file)."""


def plan_default_text(value: object) -> str | None:
    """A plan field's default as a reader expects it, computed here (not by _defaults)."""
    if value in (None, "", (), dataclasses.MISSING):
        return None
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def test_every_learn_option_shows_its_plans_default_and_restates_none() -> None:
    """LearnPlan is the one home of learn's defaults: each option is unset (None) unless given, and its
    help shows the plan's default (a default written in the option too fails here)."""
    from cua_stream.app.learn.plan import LearnPlan
    from cua_stream.cli.learn import learn

    command = dict(commands(click_root()))[("learn",)]
    params = {p.name: p for p in command.params}
    hints = typing.get_type_hints(inspect.unwrap(learn), include_extras=True)
    defaults = {f.name: f.default for f in dataclasses.fields(LearnPlan)}
    checked = []
    for name, parameter in inspect.signature(learn).parameters.items():
        if name in LEARN_OWN:
            continue
        (info,) = [i for i in getattr(hints[name], "__metadata__", ()) if isinstance(i, PlanOption)] or [None]
        assert info is not None and info.plan is LearnPlan, f"learn {name}: not a plan_option of LearnPlan"
        assert parameter.default is None, f"learn {name}: a default of its own, {parameter.default!r}"
        shown = params[name].show_default
        assert (shown if isinstance(shown, str) else None) == plan_default_text(defaults[info.field]), name
        checked.append(info.field)
    assert len(checked) >= 30 and {"demo_seeds", "tasks", "lr", "grpo_minutes"} <= set(checked)


@dataclasses.dataclass(frozen=True)
class LearnMutant(LearnPlan):
    demo_seeds: int = 25


def test_a_changed_plan_default_changes_learn_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """LearnPlan's demo_seeds default changed (the class replaced by a mutant, the command's module read
    again): `learn --help` shows the new default."""
    from cua_stream.app.learn import plan as plan_module
    from cua_stream.cli import learn as command_module

    def shown() -> str:
        app = typer.Typer()
        app.command()(command_module.learn)
        out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
        return next(line for line in out.splitlines() if "--demos" in line)

    assert "[default: (24)]" in shown()
    try:
        with monkeypatch.context() as patched:
            patched.setattr(plan_module, "LearnPlan", LearnMutant)
            importlib.reload(command_module)
            assert "[default: (25)]" in shown()
    finally:
        importlib.reload(command_module)
    assert "[default: (24)]" in shown()


def test_an_option_naming_no_plan_field_fails_at_import() -> None:
    with pytest.raises(KeyError, match="LearnPlan has no field 'demo_sedes'"):
        plan_option(LearnPlan, "demo_sedes", help="A typo.")
