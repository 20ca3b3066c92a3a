"""The container engine as a part the project runs itself, like the Kafka broker: a private Docker
daemon (its own socket and data root under the state directory), the compose CLI plugin Harbor's docker
environment calls, and the images the episodes run in, built here from Debian's packages (no registry
is reachable from these machines, so nothing is ever pulled).

``cua-stream containers start|stop|status|build|env`` drives it; ``scripts/test.sh`` starts it for the
tests that run episodes in containers.
"""

from __future__ import annotations

from collections.abc import Callable

from cua_stream.config import export_env
from cua_stream.containers.dockerd import DockerHome


def ensure_running(
    *, build: bool = True, export: bool = True, say: Callable[[str], object] = lambda line: None
) -> tuple[DockerHome, bool]:
    """The private daemon up, the compose plugin installed and (with ``build``) the images built, each
    only if it is not already; with ``export``, this process's docker calls (and Harbor's) pointed at it.
    Returns the daemon's home and whether this call started it."""
    from cua_stream.containers import compose_plugin, dockerd, images

    home = DockerHome.default()
    if not home.compose_plugin.exists():
        say("installing the docker compose plugin (built from its Go module the first time: minutes)")
    compose_plugin.ensure_plugin(home.compose_plugin)
    started = dockerd.start(home)
    if build:
        for built in images.build_all(home, say=say):
            say(f"image {built.name}: {'built' if built.built else 'up to date'} ({built.seconds:.1f} s)")
    if export:
        export_env(home.client_env())
    return home, started
