"""The images episodes run in, built here and cached: nothing is pulled (no registry is reachable).

- ``cua-debian:bookworm``: a Debian root filesystem from ``debootstrap`` (minbase), imported;
- ``cua-desktop:local``: FROM it, the computer-1 desktop from Debian's packages;
- ``cua-tasks:local``: FROM the desktop, the bundled tasks' pages, ready probe and verifier, the installed
  MiniWoB++ package's pages (its ``html/`` only), and the entrypoint that brings an episode's desktop and pages up (each bundled task's ``environment/Dockerfile``
  is ``FROM`` it, named by the build argument ``CUA_TASKS_IMAGE``).

Each image carries a label with the hash of what it was built from (its build context, and its base
image's id): a build is skipped when the label matches, so a second run costs seconds, and a changed
Dockerfile, package list or task module rebuilds exactly what depends on it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cua_stream.config import child_env
from cua_stream.containers.dockerd import DockerHome
from cua_stream.errors import ContainerEngineError, MiniwobMissing

LABEL = "org.cua-stream.context"
BASE = "cua-debian:bookworm"
DESKTOP = "cua-desktop:local"
TASKS = "cua-tasks:local"
MIRROR = "http://deb.debian.org/debian"
TASK_MODULES = (
    "__init__", "pages", "server", "ready", "verify", "verdict",
    "miniwob/__init__", "miniwob/package", "miniwob/site", "miniwob/wrapper", "miniwob/verdict",
)  # fmt: skip
"""``cua_stream.tasks`` modules the tasks image carries (standard library only; Debian's Python 3.11)."""
BUILD_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Built:
    name: str
    built: bool
    """False: the cached image was up to date."""
    seconds: float


def docker(home: DockerHome, *args: str, input: bytes | None = None, timeout: float = BUILD_TIMEOUT_S,
           check: bool = True) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """Run the docker CLI against ``home``'s daemon."""
    exe = shutil.which("docker")
    if exe is None:
        raise ContainerEngineError("the docker CLI is not installed: apt-get install -y docker.io")
    env = child_env(**home.client_env(), DOCKER_BUILDKIT="0")  # the 20.10 daemon's classic builder
    done = subprocess.run([exe, *args], input=input, env=env, capture_output=True, timeout=timeout)
    if check and done.returncode != 0:
        raise ContainerEngineError(
            f"docker {' '.join(args[:2])} failed: {done.stderr.decode(errors='replace')[-2000:]}"
        )
    return done


def image_label(home: DockerHome, name: str) -> tuple[str, str] | None:
    """(the context label, the image id) of ``name``, or None if there is no such image."""
    done = docker(home, "image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}} {{{{.Id}}}}',
                  name, check=False)  # fmt: skip
    if done.returncode != 0:
        return None
    label, _, image_id = done.stdout.decode().strip().rpartition(" ")
    return label, image_id


def digest(files: Mapping[str, bytes], *extra: str) -> str:
    """A stable hash of a build context (its files by relative path) and anything else it depends on."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    for item in extra:
        h.update(b"\1" + item.encode())
    return h.hexdigest()[:32]


# -- the build contexts ---------------------------------------------------------------------------------


def desktop_context() -> dict[str, bytes]:
    from cua_stream.browser import CHROMIUM_POLICY

    here = resources.files("cua_stream.containers").joinpath("contexts", "desktop")
    files = {
        name: here.joinpath(name).read_bytes() for name in ("Dockerfile", "debian.sources", "dpkg-slim.cfg")
    }
    files["packages.txt"] = resources.files("cua_stream.desktop").joinpath("packages.txt").read_bytes()
    files["chromium-policy.json"] = CHROMIUM_POLICY.encode()
    return files


def tasks_context() -> dict[str, bytes]:
    """The tasks image's context: ``opt/`` becomes ``/opt/cua`` (its ``PYTHONPATH``): the task modules and
    the installed MiniWoB++ package's ``html/`` with its distribution's metadata, so the page server finds
    it there as it does on the host (``cua_stream.tasks.miniwob.package``); none of its Python."""
    here = resources.files("cua_stream.containers").joinpath("contexts", "tasks")
    files = {name: here.joinpath(name).read_bytes() for name in ("Dockerfile", "entrypoint.sh")}
    files["opt/cua_stream/__init__.py"] = b""
    files["opt/cua_stream/errors.py"] = resources.files("cua_stream").joinpath("errors.py").read_bytes()
    tasks = resources.files("cua_stream.tasks")
    for module in TASK_MODULES:
        files[f"opt/cua_stream/tasks/{module}.py"] = tasks.joinpath(f"{module}.py").read_bytes()
    files.update(miniwob_files())
    return files


def miniwob_files() -> dict[str, bytes]:
    """The installed MiniWoB++ package's ``html/`` and distribution metadata (METADATA, its licence) under
    ``opt/``; nothing when it is not installed (the bundled tasks need none of it; a ``miniwob/*`` task's
    server then says how to install it)."""
    import importlib.metadata

    from cua_stream.tasks.miniwob.package import DISTRIBUTION, installed

    try:
        package = installed()
    except MiniwobMissing:
        return {}
    files = {
        f"opt/miniwob/html/{path.relative_to(package.html).as_posix()}": path.read_bytes()
        for path in sorted(package.html.rglob("*"))
        if path.is_file()
    }
    dist = importlib.metadata.distribution(DISTRIBUTION)
    info = f"opt/miniwob-{package.version}.dist-info"
    for rel in ("METADATA", "licenses/LICENSE"):
        text = dist.read_text(rel)
        if text is not None:
            files[f"{info}/{rel}"] = text.encode()
    return files


# -- builds ---------------------------------------------------------------------------------------------


def build_all(
    home: DockerHome, *, rebuild: bool = False, say: Callable[[str], object] = lambda line: None
) -> list[Built]:
    """The base, desktop and tasks images, each built only if what it depends on changed."""
    out = [build_base(home, rebuild=rebuild, say=say)]
    out.append(build_context(home, DESKTOP, desktop_context(), {"BASE": BASE}, rebuild=rebuild, say=say,
                             network=True))  # fmt: skip
    out.append(build_context(home, TASKS, tasks_context(), {"DESKTOP": DESKTOP}, rebuild=rebuild, say=say))
    return out


def build_base(home: DockerHome, *, rebuild: bool = False, say: Callable[[str], object]) -> Built:
    """``debootstrap`` a bookworm minbase root filesystem (kept under the docker home), import it."""
    started = time.monotonic()
    wanted = digest({}, "bookworm", "minbase", MIRROR)
    found = image_label(home, BASE)
    if found is not None and found[0] == wanted and not rebuild:
        return Built(BASE, False, time.monotonic() - started)
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ContainerEngineError(
            "debootstrap is not installed (it makes the base image: no registry is reachable): "
            "run scripts/setup.sh as root, or apt-get install -y debootstrap"
        )
    rootfs = home.root / "rootfs" / "bookworm"
    unmount_under(rootfs)  # debootstrap leaves its /proc mounted in the root filesystem
    if rebuild or not (rootfs / "bin" / "bash").exists():
        say(f"{BASE}: debootstrap bookworm (about a minute)")
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([debootstrap, "--variant=minbase", "bookworm", str(rootfs), MIRROR],
                              capture_output=True, timeout=BUILD_TIMEOUT_S)  # fmt: skip
        unmount_under(rootfs)
        if done.returncode != 0:
            shutil.rmtree(rootfs, ignore_errors=True)
            raise ContainerEngineError(f"debootstrap failed: {done.stderr.decode(errors='replace')[-2000:]}")
    say(f"{BASE}: importing the root filesystem")
    tar = subprocess.run(["tar", "--one-file-system", "-C", str(rootfs), "-c", "."], capture_output=True)
    if tar.returncode != 0:
        raise ContainerEngineError(f"packing {rootfs} failed: {tar.stderr.decode(errors='replace')[-2000:]}")
    docker(home, "import", "--change", f"LABEL {LABEL}={wanted}", "--change", 'CMD ["bash"]', "-", BASE,
           input=tar.stdout)  # fmt: skip
    return Built(BASE, True, time.monotonic() - started)


def unmount_under(root: Path) -> None:
    """Unmount whatever is mounted at or below ``root`` (deepest first)."""
    prefix = str(root.resolve())
    try:
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        return
    for target in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def build_context(
    home: DockerHome,
    name: str,
    files: Mapping[str, bytes],
    args: Mapping[str, str],
    *,
    rebuild: bool = False,
    network: bool = False,
    say: Callable[[str], object],
) -> Built:
    """``docker build`` of ``files`` as ``name``, unless an image built from the same context and base
    images is there."""
    started = time.monotonic()
    bases = []
    for base in args.values():
        found = image_label(home, base)
        if found is None:
            raise ContainerEngineError(f"{name} is built FROM {base}, which is missing: build it first")
        bases.append(found[1])
    wanted = digest(files, *bases, json.dumps(dict(args), sort_keys=True))
    found = image_label(home, name)
    if found is not None and found[0] == wanted and not rebuild:
        return Built(name, False, time.monotonic() - started)
    say(f"{name}: building")
    with tempfile.TemporaryDirectory(prefix="cua-image-") as ctx:
        for rel, data in files.items():
            path = Path(ctx) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        cmd = ["build", "-t", name, "--label", f"{LABEL}={wanted}"]
        cmd += [f"--build-arg={k}={v}" for k, v in args.items()]
        if network:
            cmd += ["--network", "host"]  # apt reaches Debian's mirrors as the host does
        docker(home, *cmd, ctx)
    docker(home, "image", "prune", "-f", check=False)  # the image this one replaced, now untagged
    return Built(name, True, time.monotonic() - started)
