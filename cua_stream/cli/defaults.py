"""Defaults in ``--help`` read from the config fields the options feed, never written by hand.

A command's option that overrides a config field (flags > environment > file > default) has no default
of its own (None: "not given", so the file and the environment still count). ``field_option`` names the
field, and ``--help`` (and the generated CLI reference) shows that field's default, read from its
settings class in the registry (``cua_stream.config.SECTIONS``): change the field and the help follows.
``plan_option`` does the same for an option that sets a field of a command's plan (a dataclass such as
``cua_stream.app.learn.plan.LearnPlan``): unset, the plan keeps its own default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
from typer.models import OptionInfo

from cua_stream import config


class _ShowsDefault(OptionInfo):
    """An option with no default of its own (None: not given) whose help shows ``default``: the value
    that holds when it is not given, owned by a class's field."""

    def __init__(
        self, default: Any, param_decls: tuple[str, ...], help: str, options: dict[str, Any]
    ) -> None:
        shown = shown_default(default)
        super().__init__(
            default=..., param_decls=param_decls, help=help, show_default=shown or False, **options
        )


class FieldOption(_ShowsDefault):
    """A typer option that feeds the config field ``[section] field``; its help shows the field's default."""

    def __init__(self, section: str, field: str, *param_decls: str, help: str, **options: Any) -> None:
        self.section = section
        self.field = field
        super().__init__(field_default(section, field), param_decls, help, options)


class PlanOption(_ShowsDefault):
    """A typer option that sets the field ``field`` of the plan ``plan`` (a dataclass); its help shows the
    field's default."""

    def __init__(self, plan: type, field: str, *param_decls: str, help: str, **options: Any) -> None:
        self.plan = plan
        self.field = field
        super().__init__(plan_default(plan, field), param_decls, help, options)


def field_option(section: str, field: str, *param_decls: str, help: str, **options: Any) -> Any:
    """The option (for ``Annotated[T | None, field_option(...)] = None``) that feeds ``[section] field``;
    ``options`` are typer's (``min=1``). A field the section does not have is a KeyError when the
    command's module is imported."""
    return FieldOption(section, field, *param_decls, help=help, **options)


def plan_option(plan: type, field: str, *param_decls: str, help: str, **options: Any) -> Any:
    """The option (for ``Annotated[T | None, plan_option(...)] = None``) that sets ``plan``'s ``field``;
    None (not given) leaves the plan's default. A field the plan does not have is a KeyError when the
    command's module is imported."""
    return PlanOption(plan, field, *param_decls, help=help, **options)


def plan_default(plan: type, field: str) -> Any:
    """The default of the dataclass ``plan``'s ``field``, or ``msgspec.NODEFAULT`` for a required one."""
    for info in dataclasses.fields(plan):
        if info.name == field:
            if info.default_factory is not dataclasses.MISSING:
                return info.default_factory()
            return msgspec.NODEFAULT if info.default is dataclasses.MISSING else info.default
    raise KeyError(f"{plan.__name__} has no field {field!r}")


def field_default(section: str, field: str) -> Any:
    """The default of ``[section] field``: its value, or ``msgspec.NODEFAULT`` for a required field."""
    for info in msgspec.structs.fields(config.section_class(section)):
        if info.name == field:
            if info.default_factory is not msgspec.NODEFAULT:
                return info.default_factory()
            return info.default
    raise KeyError(f"[{section}] has no field {field!r} (cua_stream.config.SECTIONS)")


def shown_default(value: Any) -> str | None:
    """A default as ``--help`` writes it; None for none to show (a required field, or an empty one whose
    meaning the option's help says: "unset: ...")."""
    if value is msgspec.NODEFAULT or value is None or value == "" or value == [] or value == {}:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
