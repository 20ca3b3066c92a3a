"""The local desktop environment, built by Harbor's own factory from its import path: each episode in its
own namespaces, side by side, with its own display :1, /tmp and process table; commands return when
they exit even when they leave daemons behind; files move in and out; stop leaves nothing on the host."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from harbor.environments.base import BaseEnvironment
from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from cua_stream.desktop.environment import TYPE
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
]
IMPORT_PATH = "cua_stream.desktop.environment:LocalDesktopEnvironment"


def make(tmp: Path, name: str) -> BaseEnvironment:
    trial = tmp / name
    trial.mkdir()
    return EnvironmentFactory.create_environment_from_import_path(
        IMPORT_PATH,
        environment_dir=trial,
        environment_name=name,
        session_id=f"{name}__env",
        trial_paths=TrialPaths(trial_dir=trial),
        task_env_config=EnvironmentConfig(),
    )


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[BaseEnvironment, BaseEnvironment]]:
    a, b = make(tmp_path, "ep-a"), make(tmp_path, "ep-b")
    await a.start(force_build=False)
    await b.start(force_build=False)
    try:
        yield a, b
    finally:
        await a.stop(delete=True)
        await b.stop(delete=True)


def host_processes(marker: str) -> str:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return "\n".join(line for line in out.splitlines() if marker in line)


async def test_episodes_side_by_side_each_with_its_own_display_tmp_and_processes(
    pair: tuple[BaseEnvironment, BaseEnvironment],
) -> None:
    a, b = pair
    assert a.type() == TYPE
    for env in pair:  # Harbor's runtime starts Xvfb :1 with `&` inside one exec: that exec must return
        with anyio.fail_after(10):
            started = await env.exec("Xvfb :1 -screen 0 640x480x24 >/dev/null 2>&1 & sleep 0.5; echo up")
        assert started.return_code == 0 and started.stdout == "up\n"
    # the display answers (within 30 s: the half second above is Harbor's, not a readiness wait)
    answers = await a.exec(
        "for _ in $(seq 300); do DISPLAY=:1 xdotool getdisplaygeometry >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1"
    )
    assert answers.return_code == 0, "Xvfb :1 never answered"
    shot = await a.exec(
        "DISPLAY=:1 xdotool mousemove 5 5 && DISPLAY=:1 import -window root /tmp/s.png && wc -c < /tmp/s.png"
    )
    assert shot.return_code == 0 and int(shot.stdout) > 0
    assert (await b.exec("test -e /tmp/s.png")).return_code == 1  # /tmp is the episode's own
    await a.exec("pkill -9 Xvfb")  # as Harbor's reset does with chromium: the other episode's survives
    assert (await b.exec("pgrep -x Xvfb")).return_code == 0
    # SIGKILL is delivered and the zombie reaped by our init after pkill returns: gone within 10 s
    gone = await a.exec("for _ in $(seq 100); do pgrep -x Xvfb >/dev/null || exit 0; sleep 0.1; done; exit 1")
    assert gone.return_code == 0, "Xvfb outlived pkill -9 in its own episode (or was never reaped)"
    assert "trap : CHLD" in (await a.exec("tr '\\0' ' ' < /proc/1/cmdline")).stdout  # our reaping init


async def test_files_move_in_and_out_and_logs_land_in_the_trial(tmp_path: Path) -> None:
    env = make(tmp_path, "ep-files")
    await env.start(force_build=False)
    try:
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "page.html").write_text("<button>OK</button>")
        await env.upload_dir(source_dir=tmp_path / "in", target_dir="/tests")
        await env.upload_file(tmp_path / "in" / "page.html", "/tmp/work/page.html")
        assert (await env.exec("cat /tests/page.html /tmp/work/page.html")).stdout.count("OK") == 2
        await env.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt")
        assert (tmp_path / "ep-files" / "desktop" / "logs" / "verifier" / "reward.txt").read_text() == "1\n"
        await env.download_file("/tmp/work/page.html", tmp_path / "out" / "page.html")
        await env.download_dir(source_dir="/logs", target_dir=tmp_path / "logs-copy")
        assert (tmp_path / "out" / "page.html").exists() and (tmp_path / "logs-copy" / "verifier").is_dir()
        result = await env.exec("pwd; echo $FOO; echo $OPENAI_API_KEY", cwd="/tests", env={"FOO": "bar"})
        assert result.stdout == "/tests\nbar\n\n"  # the host's variables (keys) do not leak in
        timed = await env.exec("sleep 5", timeout_sec=1)
        assert timed.return_code == 124
    finally:
        await env.stop(delete=True)


async def test_stop_leaves_nothing_of_the_episode_on_the_host(tmp_path: Path) -> None:
    env = make(tmp_path, "ep-stop")
    await env.start(force_build=False)
    marker = f"cua-marker-{uuid.uuid4().hex[:8]}"
    await env.exec(
        f"setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 & nohup sleep 301 >/dev/null 2>&1 &"
    )
    assert host_processes(marker)
    await env.stop(delete=True)
    for _ in range(100):  # SIGKILL of the init: the kernel ends the rest at once
        if not host_processes(marker):
            break
        await anyio.sleep(0.05)
    assert not host_processes(marker)
    with pytest.raises(Exception, match="not started"):
        await env.exec("true")


async def test_a_start_cancelled_before_the_desktop_came_up_leaves_no_logs_to_collect(tmp_path: Path) -> None:
    env = make(tmp_path, "ep-cancelled")
    with anyio.CancelScope() as scope:  # a producer stopping while the episode starts
        scope.cancel()
        await env.start(force_build=False)
    await env.download_dir("/logs/agent", tmp_path / "collected")  # Harbor's finally: no traceback
    assert not (tmp_path / "collected").exists()
    with pytest.raises(Exception, match="not started"):  # anything else still says so
        await env.exec("true")


def test_host_dirs_under_tmp_that_the_episode_needs_stay_visible(tmp_path: Path) -> None:
    """A checkout (and its virtualenv) under /tmp: the private /tmp would hide it from the episode's task
    server and verifier; the kept directories are bound back at their paths, nothing else of /tmp is."""
    from cua_stream.desktop.namespace import EpisodeNamespace

    kept, hidden = tmp_path / "checkout", tmp_path / "other"
    kept.mkdir()
    hidden.mkdir()
    (kept / "code.py").write_text("print('from the checkout')\n")
    (hidden / "secret.txt").write_text("host /tmp\n")
    ns = EpisodeNamespace(tmp_path / "episode", keep=[kept])
    ns.start()
    try:
        assert ns.run(f"python3 {kept / 'code.py'}").stdout == "from the checkout\n"
        assert ns.run(f"cat {hidden / 'secret.txt'}").return_code != 0
        assert ns.run(f"touch {kept / 'made-inside'}").return_code == 0  # the same directory, not a copy
    finally:
        ns.stop()
    assert (kept / "made-inside").exists()


def test_two_threads_stopping_one_namespace_close_its_lifeline_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled trial's cleanup still running in its worker thread while the producer's ``stop_all``
    reaches the same namespace: each fd is closed once (a second close failed with EBADF, and could close
    a reused number). ``os.close`` is slowed so both threads are inside ``stop`` together."""
    import threading

    from cua_stream.desktop import namespace

    ns = namespace.EpisodeNamespace(tmp_path / "episode")
    ns.start()
    lifeline = ns._lifeline
    closed: list[int] = []
    real_close = os.close

    def slow_close(fd: int) -> None:
        time.sleep(0.05)
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(namespace.os, "close", slow_close)
    errors: list[BaseException] = []
    gate = threading.Barrier(4)

    def stop() -> None:
        gate.wait()
        try:
            ns.stop()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=stop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and closed.count(lifeline) == 1, (errors, closed)
    assert ns not in namespace.LIVE and ns.init_pid is None


def test_a_killed_owner_leaves_no_episode_behind(tmp_path: Path) -> None:
    """The owner of a namespace dies by kill -9 (a crashed producer): the episode's processes end too."""
    import signal
    import sys
    import textwrap

    marker = f"cua-orphan-{uuid.uuid4().hex[:8]}"
    owner = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from cua_stream.desktop.namespace import EpisodeNamespace
        ns = EpisodeNamespace(Path({str(tmp_path / "orphan")!r}))
        ns.start()
        ns.run("setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &")
        print("up", flush=True)
        time.sleep(300)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        assert host_processes(marker)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    for _ in range(200):
        if not host_processes(marker):
            break
        time.sleep(0.05)
    assert not host_processes(marker)


async def test_computer1s_own_runtime_runs_four_desktops_side_by_side(tmp_path: Path) -> None:
    """Harbor's Computer1Session (Xvfb, xfce4, Chromium, xdotool, ImageMagick, cwebp) in four episodes
    started together: each acts on and screenshots its own desktop; one's reset
    (``pkill -9 -f chromium``) leaves the others' browsers alone."""
    import base64
    import io
    from pathlib import PurePosixPath

    from harbor.agents.computer_1.runtime import Computer1Session, ComputerAction
    from PIL import Image

    envs = [make(tmp_path, f"ep-{i}") for i in range(4)]
    sessions = [
        Computer1Session(
            env,
            PurePosixPath("/logs/agent"),
            desktop_width=640,
            desktop_height=480,
            window_width=640,
            window_height=480,
            readiness_timeout_sec=90,
        )
        for env in envs
    ]

    async def shows(env: BaseEnvironment, text: str) -> bool:
        titles = await env.exec("DISPLAY=:1 xdotool search --name . getwindowname %@ 2>/dev/null")
        return text in (titles.stdout or "")

    def colour(i: int) -> tuple[int, int, int]:
        return (20 + 60 * i, 20, 20)

    async def captured(i: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """Episode i's screen as computer-1 captures it: its size, and the page's colour below the text."""
        await sessions[i].fetch_screenshot(f"/tmp/shot-{i}.webp")  # computer-1's capture + cwebp
        assert (await envs[i].exec(f"test -s /tmp/shot-{i}.webp")).return_code == 0
        url = await sessions[i].latest_png_data_url()
        image = Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2])))
        return image.size, image.convert("RGB").getpixel((320, 400))

    try:
        with anyio.fail_after(240):
            for env, session in zip(envs, sessions, strict=True):  # all four run at once from here on
                await env.start(force_build=False)
                await session.start()
            for i, (env, session) in enumerate(zip(envs, sessions, strict=True)):
                page = f"data:text/html,<body style='background:rgb({20 + 60 * i},20,20)'><h1>episode {i}</h1></body>"
                while not await shows(env, f"episode {i}"):  # as an agent would: look, navigate again
                    await session.execute(ComputerAction(type="navigate", url=page))
                    with anyio.move_on_after(5):  # how long to look before navigating again, not a verdict
                        await wait_until(lambda env=env, i=i: shows(env, f"episode {i}"), poll_s=0.5)
                await session.execute(ComputerAction(type="click", x=100, y=100))
            shots: dict[int, tuple[tuple[int, int], tuple[int, int, int]]] = {}
            for i in range(4):  # each screen once its page is painted (the title comes first)

                async def painted(i: int = i) -> bool:
                    shots[i] = await captured(i)
                    return shots[i][1] == colour(i)

                await wait_until(painted, poll_s=0.5)
        assert {size for size, _ in shots.values()} == {(640, 480)}
        assert [shots[i][1] for i in range(4)] == [colour(i) for i in range(4)]  # each its own page
        await sessions[0].reset()
        for env in envs[1:]:
            assert (await env.exec("pgrep -f chromium >/dev/null")).return_code == 0
    finally:
        for env in envs:
            await env.stop(delete=True)
