"""Defaults in ``--help`` read from the config fields the options feed, never written by hand.

A command's option that overrides a config field (flags > environment > file > default) has no default
of its own (None: "not given", so the file and the environment still count). ``field_option`` names the
field, and ``--help`` (and the generated CLI reference) shows that field's default, read from its
settings class in the registry (``cua_stream.config.SECTIONS``): change the field and the help follows.
"""

from __future__ import annotations

from typing import Any

import msgspec
from typer.models import OptionInfo

from cua_stream import config


class FieldOption(OptionInfo):
    """A typer option that feeds the config field ``[section] field``; its help shows the field's default."""

    def __init__(self, section: str, field: str, *param_decls: str, help: str, **options: Any) -> None:
        self.section = section
        self.field = field
        shown = shown_default(field_default(section, field))
        super().__init__(
            default=..., param_decls=param_decls, help=help, show_default=shown or False, **options
        )


def field_option(section: str, field: str, *param_decls: str, help: str, **options: Any) -> Any:
    """The option (for ``Annotated[T | None, field_option(...)] = None``) that feeds ``[section] field``;
    ``options`` are typer's (``min=1``). A field the section does not have is a KeyError when the
    command's module is imported."""
    return FieldOption(section, field, *param_decls, help=help, **options)


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
