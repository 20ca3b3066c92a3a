"""`cua-stream desktop doctor`: is this host ready to run computer-1 episodes on the local desktop?"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="The local desktop (episodes in per-episode namespaces, no Docker).\n\n"
    "Example: cua-stream desktop doctor",
    no_args_is_help=True,
)
out = Console(highlight=False)


@app.command()
def doctor() -> None:
    """List the programs the local desktop calls, whether each is here, and how to install the rest.

    Example: cua-stream desktop doctor"""
    from cua_stream.desktop.doctor import container_checks, is_root, missing_packages, requirements

    table = Table("program", "package", "found")
    for req in requirements():
        table.add_row(req.program, req.package, "yes" if req.found else "[red]missing[/red]")
    out.print(table)
    missing = missing_packages()
    ok = not missing and is_root()
    if not is_root():
        out.print("[red]not root[/red]: per-episode namespaces (unshare, nsenter) need root")
    if missing:
        out.print("install what is missing with:")
        out.print(
            f"  apt-get update && apt-get install -y --no-install-recommends {' '.join(missing)}",
            markup=False,
        )
    out.print(
        "[green]the local desktop is ready[/green]" if ok else "[red]the local desktop is not ready[/red]"
    )
    containers = Table("for --environment docker", "found", "to get it")
    for what, found, fix in container_checks():
        containers.add_row(what, "yes" if found else "[red]missing[/red]", "" if found else fix)
    out.print(containers)
    raise typer.Exit(0 if ok else 1)
