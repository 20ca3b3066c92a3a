"""``LocalDesktopEnvironment``: a Harbor environment that runs an episode on this host, without Docker, in
its own mount, PID and network namespace (``namespace.EpisodeNamespace``).

Plug it in with ``EnvironmentConfig(import_path="cua_stream.desktop.environment:LocalDesktopEnvironment")``.
Files move through ``/proc/<init>/root``, the host's view of the episode's filesystem (its private /tmp
included); ``/logs`` and ``/tests`` are host directories under the trial's own, bind-mounted. ``stop``
kills the namespace's init, and with it every process the episode started (Xvfb, the window manager,
Chromium, servers a task started): nothing of it outlives the trial, nothing on the host is touched.

A task brings its own services with ``environment/start.sh``: run inside the namespace at start (with the
environment's variables, e.g. the episode's ``CUA_TASK_SEED``), it must return once they are up.
Every command sees ``CUA_PYTHON``, this process's interpreter, so task scripts can run the bundled tasks'
Python (``cua_stream.tasks``) without a Python of their own.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import anyio.to_thread
from harbor.environments.base import BaseEnvironment, ExecResult

from cua_stream import env_vars
from cua_stream.desktop.namespace import EpisodeNamespace, NamespaceError
from cua_stream.errors import TaskStartFailed

TYPE = "cua-local-desktop"
LOG_DIRS = ("agent", "verifier", "artifacts")
"""Harbor's output directories under /logs."""
START_SCRIPT = "start.sh"
START_TIMEOUT_S = 60
DESKTOP_SIZE_ENV = env_vars.DESKTOP_SIZE
"""``WxH``: start the episode's X server (display :1) at this size before the agent comes."""
_START_X = (
    "setsid nohup Xvfb :1 -screen 0 {size}x24 -fbdir /var/tmp >/tmp/xvfb.log 2>&1 </dev/null & "
    "for _ in $(seq 400); do DISPLAY=:1 xdotool getdisplaygeometry >/dev/null 2>&1 && exit 0; sleep 0.05; done; "
    "cat /tmp/xvfb.log >&2; exit 1"
)


def python_dirs() -> list[Path]:
    """This process's Python environment and cua-stream's source: the episode runs ``CUA_PYTHON`` (task
    servers, verifiers), so it must see them even when they live under /tmp (a checkout in /tmp)."""
    import cua_stream

    return [Path(sys.prefix), Path(cua_stream.__file__).resolve().parents[1]]


class LocalDesktopEnvironment(BaseEnvironment):
    _namespace: EpisodeNamespace | None = None

    @staticmethod
    def type() -> str:  # type: ignore[override]
        return TYPE

    def _validate_definition(self) -> None:
        """Nothing to build: the desktop's programs are the host's (``cua-stream desktop doctor``)."""

    @property
    def root(self) -> Path:
        """The episode's host directory (its /logs and /tests, and the namespace's log)."""
        return Path(self.trial_paths.trial_dir) / "desktop"

    def _ns(self) -> EpisodeNamespace:
        if self._namespace is None or self._namespace.init_pid is None:
            raise NamespaceError(f"environment {self.session_id} is not started")
        return self._namespace

    def _inside(self, path: str) -> Path:
        """The host path of ``path`` as the episode sees it."""
        return Path(f"/proc/{self._ns().init_pid}/root") / path.lstrip("/")

    async def start(self, force_build: bool) -> None:
        for sub in LOG_DIRS:  # Harbor's containers get these from their image; the verifier writes to them
            (self.root / "logs" / sub).mkdir(parents=True, exist_ok=True)
        # the task's environment directory too: its start script runs inside (a task under /tmp, as a
        # user's scratch copy often is, was "No such file or directory" there)
        self._namespace = EpisodeNamespace(self.root, keep=[*python_dirs(), Path(self.environment_dir)])
        await anyio.to_thread.run_sync(self._namespace.start)
        size = (self._merge_env(None) or {}).get(DESKTOP_SIZE_ENV)
        if size:
            # computer-1 starts Xvfb itself, but only waits for its socket: on a loaded host Chromium can
            # come before the server answers and exit ("Missing X server"). Up and answering here, the
            # display is reused by computer-1 (it skips its own Xvfb when the socket exists).
            if not re.fullmatch(r"\d{2,5}x\d{2,5}", size):
                raise TaskStartFailed(f"{DESKTOP_SIZE_ENV}={size!r}: expected WxH")
            result = await self.exec(_START_X.format(size=size), timeout_sec=START_TIMEOUT_S)
            if result.return_code != 0:
                raise TaskStartFailed(f"the X server did not start: {(result.stderr or '').strip()[-500:]}")
        script = Path(self.environment_dir) / START_SCRIPT
        if script.is_file():
            result = await self.exec(f"bash {shlex.quote(str(script))}", timeout_sec=START_TIMEOUT_S)
            if result.return_code != 0:
                detail = (result.stderr or result.stdout or "").strip()[-1000:]
                raise TaskStartFailed(f"{script} exited {result.return_code}: {detail or 'no output'}")

    async def stop(self, delete: bool) -> None:
        if self._namespace is not None:
            await anyio.to_thread.run_sync(self._namespace.stop)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        ns = self._ns()
        merged = {env_vars.PYTHON: sys.executable, **(self._merge_env(env) or {})}
        result = await anyio.to_thread.run_sync(
            lambda: ns.run(command, cwd=cwd, env=merged, timeout_sec=timeout_sec)
        )
        return ExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.return_code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = self._inside(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        await anyio.to_thread.run_sync(shutil.copyfile, source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = self._inside(target_dir)
        await anyio.to_thread.run_sync(lambda: shutil.copytree(source_dir, target, dirs_exist_ok=True))

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        await anyio.to_thread.run_sync(shutil.copyfile, self._inside(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        if self._namespace is not None and self._namespace.init_pid is None:
            # Cancelled while starting (a producer stopping mid-start): the episode wrote no logs, and
            # Harbor, which collects them in a ``finally``, would print this as a traceback.
            return
        source = self._inside(source_dir)
        await anyio.to_thread.run_sync(lambda: shutil.copytree(source, target_dir, dirs_exist_ok=True))
