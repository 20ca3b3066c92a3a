"""`cua-stream eval`'s spellings from before its subcommands, still run: ``eval --tasks ...`` is ``eval run
--tasks ...``, ``eval --follow RUN ...`` is ``eval follow RUN ...``, ``eval --compare A B`` is ``eval
compare A B`` and ``eval --table F --table G`` is ``eval table F G``. The group rewrites them as it parses
its arguments, so what follows is the subcommand's own parsing (a bad option: its one-line usage error,
exit 2), and says the new spelling in one line on stderr when it runs."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

OLD_SPELLING = "cua_stream.old_spelling"
"""``ctx.meta`` key: a group's arguments given in an old spelling, as the new one spells them (the docs'
check refuses an old spelling on a page: ``cua_stream.docs_commands``)."""

MODES: tuple[tuple[str, str, int], ...] = (("--compare", "compare", 2), ("--table", "table", 1),
                                           ("--follow", "follow", 1))  # fmt: skip
"""The old options that chose what ``eval`` did: the option, its subcommand now, and the values it took
(the subcommand's arguments now). The first one given wins, in the order the old command checked them."""
HELP = frozenset({"--help", "-h"})


class MissingValue(ValueError):
    """An old mode option without its values (``eval --follow`` and nothing after it)."""


def new_spelling(args: Sequence[str]) -> list[str] | None:
    """``eval``'s arguments as the subcommands spell them, when they are in the old spelling (an option
    straight after ``eval``, not --help); None when they are not."""
    if not args or not args[0].startswith("-") or args[0] in HELP:
        return None
    for option, command, count in MODES:
        if any(a.partition("=")[0] == option for a in args):
            values, rest = _taken(args, option, count)
            return [command, *values, *rest]
    return ["run", *args]


def _taken(args: Sequence[str], option: str, count: int) -> tuple[list[str], list[str]]:
    """The values of every ``option`` in ``args`` (``count`` each; ``--option=value`` counts one), and the
    arguments left."""
    values: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name != option:
            rest.append(args[i])
            i += 1
            continue
        given = [value] if eq else []
        more = count - len(given)
        given += args[i + 1 : i + 1 + more]
        if len(given) < count:
            raise MissingValue(
                f"Option '{option}' requires {'an argument' if count == 1 else f'{count} arguments'}."
            )
        values += given
        i += 1 + more
    return values, rest


class EvalGroup(TyperGroup):
    """``eval``'s subcommands, taking the old spellings too (rewritten: ``new_spelling``)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        try:
            respelled = new_spelling(args)
        except MissingValue as e:
            ctx.fail(str(e))
        if respelled is not None:
            ctx.meta[OLD_SPELLING] = respelled
            args = respelled
        return super().parse_args(ctx, args)

    def invoke(self, ctx: typer.Context) -> Any:
        respelled = ctx.meta.get(OLD_SPELLING)
        if respelled is not None:  # before the subcommand parses: said even when its options are wrong
            print(f"note: an old spelling, which still runs; now: {ctx.command_path} {shlex.join(respelled)}",
                  file=sys.stderr, flush=True)  # fmt: skip
        return super().invoke(ctx)
