"""`cua-stream containers`: the private Docker daemon and the images episodes run in (no registry: every
image is built here from Debian's packages, and cached)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.console import Console

from cua_stream.cli.common import friendly_errors, output_problem

app = typer.Typer(
    help="The container engine: a private Docker daemon (its own socket and data under the state "
    "directory), the compose plugin, and the locally built images.\n\n"
    "Example: cua-stream containers start --build",
    no_args_is_help=True,
)
out = Console(highlight=False, stderr=True)


@app.command()
@friendly_errors
def start(
    build: Annotated[bool, typer.Option(help="Also build (or check) the images.")] = False,
) -> None:
    """Start the private Docker daemon (root) and install the compose plugin (built once, ~3 min); with
    --build, build (or check) every image: the episodes' and those of a local compose run.

    Example: cua-stream containers start --build"""
    from cua_stream.app.containers import compose_images
    from cua_stream.containers import ensure_running

    home, started = ensure_running(build=build, export=False, say=out.print)
    if build:  # and the images a local compose run uses (the episodes' are built by ensure_running)
        for built in compose_images(home, rebuild=False, say=out.print):
            out.print(_built_line(built))
    out.print(f"docker daemon {'started' if started else 'already running'} at {home.host}")
    print(_exports(home))


@app.command()
@friendly_errors
def stop() -> None:
    """Stop the private Docker daemon (and every container it runs).

    Example: cua-stream containers stop"""
    from cua_stream.containers import dockerd

    home = dockerd.DockerHome.default()
    out.print("docker daemon stopped" if dockerd.stop(home) else "no docker daemon was running")


@app.command()
@friendly_errors
def status() -> None:
    """Whether the daemon answers, where it lives, and which of the project's images are built.

    Example: cua-stream containers status"""
    from cua_stream.app.containers import project_images
    from cua_stream.containers import dockerd

    home = dockerd.DockerHome.default()
    up = home.running()
    out.print(f"daemon: {'running' if up else 'not running'} ({home.host}); data under {home.root}")
    out.print(f"compose plugin: {'installed' if home.compose_plugin.exists() else 'missing'}")
    if up:
        for name, built in project_images(home):
            out.print(f"image {name}: {'built' if built else 'missing'}")
    raise typer.Exit(0 if up else 1)


@app.command()
@friendly_errors
def build(rebuild: Annotated[bool, typer.Option(help="Rebuild even if up to date.")] = False) -> None:
    """Build the base, desktop and tasks images, and the images a local compose run uses: Kafka's, the
    runtime's and the self-contained cua-stream:local from this checkout's installation (each skipped
    when what it is built from is unchanged).

    Example: cua-stream containers build --rebuild"""
    from cua_stream.app.containers import build_every_image
    from cua_stream.containers import dockerd

    home = dockerd.DockerHome.default()
    if not home.running():
        raise typer.BadParameter("the docker daemon is not running: cua-stream containers start")
    for built in build_every_image(home, rebuild=rebuild, say=out.print):
        out.print(_built_line(built))


@app.command()
@friendly_errors
def env() -> None:
    """Print the shell exports that point docker, docker compose and Harbor at the private daemon.

    Example: eval "$(cua-stream containers env)"
    """
    from cua_stream.containers import dockerd

    print(_exports(dockerd.DockerHome.default()))


@app.command("local-env")
@friendly_errors
def local_env(
    models: Annotated[str, typer.Option(help="Directory whose qwen3-vl/ holds the model (make-tiny-model).")],
    trials: Annotated[
        str | None,
        typer.Option(help="With compose/docker-producer.yml: the host directory the episodes' trials go to."),
    ] = None,
) -> None:
    """Print the exports compose/local.yml needs: this checkout and its interpreter (mounted), the
    models directory, and random secrets for those not set yet; with --trials, also what
    compose/docker-producer.yml mounts (this daemon's socket, the docker CLI, the compose plugin).
    Then: docker compose -f compose/docker-compose.yml -f compose/local.yml up -d.

    Example: eval "$(cua-stream containers local-env --models /tmp/models)"
    """
    from pathlib import Path

    from cua_stream.app.containers import local_compose_env
    from cua_stream.containers import dockerd

    values = local_compose_env(Path(models), Path(trials) if trials is not None else None)
    print(_exports(dockerd.DockerHome.default()))
    print(_export_lines(values))


@app.command("secure-env")
@friendly_errors
def secure_env(
    folder: Annotated[
        str, typer.Option("--dir", help="Where the broker's TLS material and the passwords go.")
    ],
) -> None:
    """Make (or keep) the secured compose run's secrets in --dir: a CA and the brokers' certificate, one
    SCRAM password per role (files, 0600), the users to create at format time; print the export
    compose/secure.yml needs. Then add -f compose/secure.yml to the docker compose command.

    Example: eval "$(cua-stream containers secure-env --dir ~/.cua-kafka-secrets)"
    """
    from pathlib import Path

    from cua_stream.containers import secure_compose

    if not folder.strip():  # Path("") is the current directory: the secrets would land wherever one stands
        raise typer.BadParameter(
            "give a directory (an empty one would be the current directory)", param_hint="--dir"
        )
    if problem := output_problem(Path(folder), directory=True):
        raise typer.BadParameter(problem, param_hint="--dir")
    values = secure_compose.ensure_secrets(Path(folder))
    print(_export_lines(values))


def _built_line(built: Any) -> str:
    return f"image {built.name}: {'built' if built.built else 'up to date'} ({built.seconds:.1f} s)"


def _exports(home: object) -> str:
    return _export_lines(home.client_env())  # type: ignore[attr-defined]


def _export_lines(values: Mapping[str, str]) -> str:
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in values.items())
