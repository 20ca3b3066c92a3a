"""Where an episode runs: the Harbor ``EnvironmentConfig`` of each environment the producer offers, and,
for Docker, what a container engine needs around it (the daemon found at start, each episode's compose
overlay, and the containers a killed producer left behind, removed when the next one starts).

- ``local-desktop``: cua-stream's own namespaces (``cua_stream.desktop.environment``).
- ``docker``: Harbor's own docker environment, the task's image as its ``environment/`` says (the bundled
  tasks are ``FROM cua-tasks:local``). A compose overlay per episode labels its container with the
  producer process that owns it (host, pid, process start time) and its episode and attempt, and (with
  ``container_network: none``) takes its network away: computer-1 runs here and only execs into it.
- any other Harbor environment type (``daytona``, ``modal``, ``e2b``, ...): Harbor's factory, with
  ``environment_options`` as its options and its credentials from the usual environment variables.

Every environment gets the episode's ``CUA_TASK_SEED`` and ``CUA_DESKTOP_SIZE``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cua_stream import env_vars
from cua_stream.config import child_env, export_env
from cua_stream.errors import ContainerEngineError
from producers.config import ProducerConfig
from producers.episode import EpisodeRun

log = logging.getLogger(__name__)

LOCAL_DESKTOP = "cua_stream.desktop.environment:LocalDesktopEnvironment"
OWNER = "org.cua-stream.producer"
"""Label: ``<host>:<pid>:<process start time>`` of the producer whose episode the container is."""
EPISODE = "org.cua-stream.episode"
ATTEMPT = "org.cua-stream.attempt"
PROJECT = "com.docker.compose.project"
TASKS_IMAGE = "cua-tasks:local"


def episode_env(config: ProducerConfig, episode: EpisodeRun) -> dict[str, str]:
    return {
        env_vars.TASK_SEED: str(episode.seed),
        env_vars.DESKTOP_SIZE: f"{config.desktop_width}x{config.desktop_height}",
    }


def environment_config(config: ProducerConfig, episode: EpisodeRun, overlay_file: Path) -> Any:
    """Harbor's ``EnvironmentConfig`` for ``episode`` (for docker, its compose overlay is written to
    ``overlay_file``)."""
    from harbor.models.trial.config import EnvironmentConfig

    env = episode_env(config, episode)
    if config.environment == "local-desktop":
        return EnvironmentConfig(import_path=LOCAL_DESKTOP, env=env)
    if config.environment == "docker":
        overlay_file.parent.mkdir(parents=True, exist_ok=True)
        overlay_file.write_text(json.dumps(overlay(episode, owner_token(), config.container_network)))
        return EnvironmentConfig(type="docker", env=env, extra_docker_compose=[str(overlay_file)],
                                 kwargs=dict(config.environment_options))  # fmt: skip
    return EnvironmentConfig(type=config.environment, env=env, kwargs=dict(config.environment_options))


def overlay(episode: EpisodeRun, owner: str, network: str) -> dict[str, Any]:
    """The compose overlay of one episode's container: its labels, and no network unless asked."""
    main: dict[str, Any] = {
        "labels": {OWNER: owner, EPISODE: episode.work.episode_id, ATTEMPT: str(episode.attempt)}
    }
    if network == "none":
        main["network_mode"] = "none"
    return {"services": {"main": main}}


# -- owners ---------------------------------------------------------------------------------------------


def owner_token(pid: int | None = None) -> str:
    """``<host>:<pid>:<start time>`` of a process: the start time tells a reused pid apart."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{process_start(pid)}"


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or ``""``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def orphaned(owner: str, host: str, start_of: Callable[[int], str]) -> bool:
    """Whether a container labelled ``owner`` lost its producer: on this host, and no live process has
    that pid and start time. Containers of other hosts (a shared daemon) are theirs to judge."""
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return False
    return start_of(int(parts[1])) != parts[2]


# -- docker: the engine at start, and the reaper ----------------------------------------------------------


def prepare_docker(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Point this process's docker calls at a daemon (the one in ``DOCKER_HOST``, else cua-stream's
    private daemon if it answers) and check what episodes need: the compose plugin and the bundled
    tasks' image. One line saying what to do otherwise (ContainerEngineError). Returns the variables set."""
    from cua_stream.containers.dockerd import DockerHome

    this_process = environ is None
    environ = child_env() if environ is None else environ
    added: dict[str, str] = {}
    if env_vars.DOCKER_HOST not in environ:
        home = DockerHome.default()
        if home.running():
            added = home.client_env()
            environ.update(added)
            if this_process:
                export_env(added)
    if docker(["version", "--format", "{{.Server.Version}}"], environ).returncode != 0:
        raise ContainerEngineError(
            f"producer.environment docker: no Docker daemon answers at {environ.get(env_vars.DOCKER_HOST, 'the default socket')}: "
            "start one with `cua-stream containers start --build` (root)"
        )
    if docker(["compose", "version"], environ).returncode != 0:
        raise ContainerEngineError(
            "producer.environment docker: the `docker compose` plugin is missing (Harbor's docker environment "
            "runs it): `cua-stream containers start` installs it"
        )
    if docker(["image", "inspect", TASKS_IMAGE], environ).returncode != 0:
        raise ContainerEngineError(
            f"producer.environment docker: image {TASKS_IMAGE} (the bundled tasks' base) is missing: "
            "`cua-stream containers build`"
        )
    return added


def reap_orphans(environ: dict[str, str] | None = None) -> list[str]:
    """Remove the episode containers (with their compose projects' images and volumes) whose producer on
    this host is gone (a SIGKILL leaves them running). Returns the projects removed."""
    environ = child_env() if environ is None else dict(environ)
    fmt = f'{{{{.ID}}}}\t{{{{.Label "{OWNER}"}}}}\t{{{{.Label "{PROJECT}"}}}}'
    listed = docker(["ps", "-a", "--filter", f"label={OWNER}", "--format", fmt], environ)
    if listed.returncode != 0:
        log.warning("could not list episode containers: %s", listed.stderr.strip())
        return []
    host = socket.gethostname()
    removed: list[str] = []
    for line in listed.stdout.splitlines():
        container, owner, project = [*line.split("\t"), "", "", ""][:3]
        if not orphaned(owner, host, process_start):
            continue
        down = docker(["compose", "-p", project, "down", "--volumes", "--remove-orphans"],
                      environ) if project else None  # fmt: skip
        if down is None or down.returncode != 0:
            docker(["rm", "-f", container], environ)
        if project:  # the trial's image, built by compose as <project>-<service> (down cannot name it
            # without the trial's compose files)
            built = docker(
                ["image", "ls", "-q", "--filter", f"reference={project}-*"], environ
            ).stdout.split()
            if built:
                docker(["rmi", "-f", *built], environ)
        log.warning("removed episode container %s (%s): its producer %s is gone", container, project, owner)
        removed.append(project or container)
    return removed


def docker(args: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], env=environ, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ContainerEngineError(
            "producer.environment docker: the docker CLI is not installed: apt-get install -y docker.io"
        ) from None
