"""The self-contained cua-stream image, built here from this checkout's own installation (no registry is
reachable, and a ``pip install`` in a build would fetch ~6 GB of wheels that are already on disk):

- ``cua-stream-deps:local``: FROM the runtime image, the interpreter the ``.venv`` was made from (at
  ``/opt/python``) and a virtual environment at ``/opt/venv`` holding the ``.venv``'s installed packages
  (everything but the editable cua-stream). Copied in a container with both mounted read-only, then
  committed: a build context would stream all of it through the daemon's socket. Rebuilt when the
  installed distributions, the interpreter or the runtime image change (~3 min, ~6.5 GB).
- ``cua-stream:local``: FROM it, the checkout's ``cua_stream``, ``producers`` and ``consumers`` packages
  under ``/opt/cua-stream`` (on the venv's path), ``cua-stream`` as the entrypoint. Seconds.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path

from cua_stream import env_vars
from cua_stream.containers.dockerd import DockerHome
from cua_stream.containers.images import LABEL, Built, build_context, digest, docker, image_label
from cua_stream.containers.local_compose import checkout_root, mounts_env
from cua_stream.containers.service_images import RUNTIME
from cua_stream.errors import ContainerEngineError

DEPS = "cua-stream-deps:local"
APP = "cua-stream:local"
PACKAGES = ("cua_stream", "producers", "consumers")
PYTHON = "/opt/python"
VENV = "/opt/venv"
SOURCE = "/opt/cua-stream"
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def installed(site_packages: Path) -> list[str]:
    """The installed distributions (``name-version``), cua-stream's own editable install left out."""
    return sorted(
        p.name.removesuffix(".dist-info")
        for p in site_packages.glob("*.dist-info")
        if not p.name.startswith("cua_stream-")
    )


def copy_script(venv: str, python_home: str) -> str:
    """What runs in the build container: the interpreter and the packages copied, the editable install
    swapped for a path entry, the console scripts pointed at the new interpreter."""
    site = f"lib/{PY}/site-packages"
    return f"""set -eu
cp -a {shlex.quote(python_home)} {PYTHON}
{PYTHON}/bin/{PY} -m venv --without-pip {VENV}
cp -a {shlex.quote(venv)}/{site}/. {VENV}/{site}/
cd {VENV}/{site}
rm -rf __editable__.cua_stream-* __editable___cua_stream_* cua_stream-*.dist-info
echo {SOURCE} > cua-stream.pth
for s in {shlex.quote(venv)}/bin/*; do
  [ -f "$s" ] && [ ! -e "{VENV}/bin/$(basename "$s")" ] || continue
  case "$(head -n 1 "$s")" in "#!"{shlex.quote(venv)}/bin/python*) ;; *) continue ;; esac
  {{ echo "#!{VENV}/bin/python"; tail -n +2 "$s"; }} > "{VENV}/bin/$(basename "$s")"
  chmod 755 "{VENV}/bin/$(basename "$s")"
done
"""


def build_deps(
    home: DockerHome, checkout: Path, *, rebuild: bool = False, say: Callable[[str], object] = print
) -> Built:
    """``cua-stream-deps:local`` from ``checkout``'s ``.venv`` (cached by what it is made from)."""
    started = time.monotonic()
    runtime = image_label(home, RUNTIME)
    if runtime is None:
        raise ContainerEngineError(
            f"{DEPS} is built FROM {RUNTIME}, which is missing: cua-stream containers build"
        )
    mounts = mounts_env(checkout)
    venv = str(checkout / ".venv")
    python_home = mounts[env_vars.PYTHON_HOME]
    version = (Path(python_home) / "bin" / PY).resolve()
    wanted = digest(
        {}, runtime[1], str(version), json.dumps(installed(Path(venv) / "lib" / PY / "site-packages"))
    )
    found = image_label(home, DEPS)
    if found is not None and found[0] == wanted and not rebuild:
        return Built(DEPS, False, time.monotonic() - started)
    say(f"{DEPS}: copying {checkout}/.venv and its interpreter (~3 min the first time)")
    name = f"cua-deps-build-{uuid.uuid4().hex[:8]}"
    try:
        docker(home, "run", "--name", name, "--network", "none", "-e", f"LD_LIBRARY_PATH={PYTHON}/lib",
               "-v", f"{venv}:{venv}:ro", "-v", f"{python_home}:{python_home}:ro",
               RUNTIME, "bash", "-c", copy_script(venv, python_home))  # fmt: skip
        changes = [f"LABEL {LABEL}={wanted}", f"ENV LD_LIBRARY_PATH={PYTHON}/lib",
                   f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]  # fmt: skip
        # The interpreter's RUNPATH names where it was built; the library path finds it where it is now.
        docker(home, "commit", *(a for c in changes for a in ("--change", c)), name, DEPS)
    finally:
        docker(home, "rm", "-f", name, check=False)
    docker(home, "image", "prune", "-f", check=False)
    return Built(DEPS, True, time.monotonic() - started)


def source_files(checkout: Path, packages: Iterable[str] = PACKAGES) -> dict[str, bytes]:
    """The checkout's packages by path under ``src/`` (compiled files left out)."""
    files = {}
    for package in packages:
        for path in sorted((checkout / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files[f"src/{path.relative_to(checkout)}"] = path.read_bytes()
    return files


def app_context(checkout: Path) -> dict[str, bytes]:
    here = resources.files("cua_stream.containers").joinpath("contexts", "app")
    return {"Dockerfile": here.joinpath("Dockerfile").read_bytes(), **source_files(checkout)}


def build_app(
    home: DockerHome,
    checkout: Path | None = None,
    *,
    rebuild: bool = False,
    say: Callable[[str], object] = print,
) -> list[Built]:
    """The dependencies image, then ``cua-stream:local`` (the runtime image must be built)."""
    checkout = checkout or checkout_root()
    deps = build_deps(home, checkout, rebuild=rebuild, say=say)
    app = build_context(home, APP, app_context(checkout), {"DEPS": DEPS}, rebuild=rebuild, say=say)
    return [deps, app]
