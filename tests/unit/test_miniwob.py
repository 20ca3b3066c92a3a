"""The MiniWoB++ suite's pure parts: which tasks the package's registration makes into tasks and which are
left out (and why), names and globs, the export template, the verdict, and what the episode's server
accepts from whom. The installed package (scripts/setup.sh installs it) is read where a test says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cua_stream.errors import MiniwobMissing, TaskVersionMismatch, UnknownTask
from cua_stream.tasks.miniwob import package
from cua_stream.tasks.miniwob.export import check_exported, export, task_files, thresholds_for
from cua_stream.tasks.miniwob.names import names_of
from cua_stream.tasks.miniwob.site import Episode, static_file
from cua_stream.tasks.miniwob.suite import (
    FLIGHT_REASON,
    LEFT_OUT,
    UNREGISTERED_REASON,
    Registration,
    Suite,
    Task,
    installed_suite,
    parse_docs,
    parse_registrations,
    plan_suite,
)
from cua_stream.tasks.miniwob.verdict import verdict
from cua_stream.tasks.miniwob.wrapper import page

REGISTRATION = """
from gymnasium.envs.registration import register

def register_miniwob_envs():
    register(
        id="miniwob/click-test-v1",
        entry_point="miniwob.envs.miniwob_envs:ClickTestEnv",
    )
    register(
        id="miniwob/choose-date-v1",
        entry_point="miniwob.envs.miniwob_envs:ChooseDateEnv",
        nondeterministic=True,  # datepicker state persists
    )
    register(
        id="miniwob/stock-market-v1",
        entry_point="miniwob.envs.miniwob_envs:StockMarketEnv",
        nondeterministic=True,
    )
    register(id="miniwob/flight.AA-v1", entry_point="miniwob.envs.flightwob_envs:FlightAAEnv")
    register(id="miniwob/no-page-v1", entry_point="miniwob.envs.miniwob_envs:NoPageEnv")
"""
DOCS = '''
class ClickTestEnv(MiniWoBEnvironment):
    """
    ## Description

    Click on a specific
    button.

    ## Additional notes

    * **Partial reward:** none really.
    * Since the reward is a continuous value, use the `get_thresholded_reward` reward preprocessor.
    """
'''
PAGES = ("click-test", "choose-date", "stock-market", "simon-says", "my-own-page")


def small_suite() -> Suite:
    return plan_suite("9.9", parse_registrations(REGISTRATION), PAGES, parse_docs(DOCS))


def test_the_registered_tasks_become_the_suite_and_every_other_page_is_left_out_with_its_reason() -> None:
    regs = parse_registrations(REGISTRATION)
    assert regs[0] == Registration("click-test", "miniwob.envs.miniwob_envs:ClickTestEnv", None)
    assert regs[1].nondeterministic == "datepicker state persists"  # the comment on its line
    assert regs[2].nondeterministic == "marked nondeterministic"  # no comment
    suite = small_suite()
    assert suite.names == ("choose-date", "click-test")
    assert suite.task("click-test") == Task(
        "click-test", "Click on a specific button.", None, partial=True, continuous=True
    )
    assert suite.task("choose-date").description == ""  # no docstring found: the name stands in at export
    assert dict(suite.left_out) == {
        "flight.AA": FLIGHT_REASON,
        "my-own-page": UNREGISTERED_REASON,
        "no-page": "registered, but the package has no page for it",
        "simon-says": LEFT_OUT["simon-says"],
        "stock-market": LEFT_OUT["stock-market"],
    }


def test_the_installed_package_gives_every_registered_task_but_the_real_time_one_and_flightwob() -> None:
    suite = installed_suite()
    source = (package.installed().root / "registration.py").read_text()
    registered = {r.name for r in parse_registrations(source)}
    pages = {p.stem for p in (package.installed().html / "miniwob").glob("*.html")}
    assert set(suite.names) == {n for n in registered if not n.startswith("flight.")} - set(LEFT_OUT)
    assert {n for n, _ in suite.left_out} == set(LEFT_OUT) | (pages - registered) | {
        n for n in registered if n.startswith("flight.")
    }
    assert all(package.installed().page(n).is_file() for n in suite.names)
    assert all(t.description for t in suite.tasks)  # each from its environment class's docstring
    # miniwob 1.1.0, pinned: 125 registered pages of 130, stock-market left out; FlightWoB's 3 apart
    assert (suite.version, len(suite.names), len(suite.left_out)) == ("1.1.0", 124, 9)
    assert {t.name for t in suite.tasks if t.continuous} >= {"circle-center", "bisect-angle"}


def test_names_globs_and_the_whole_suite() -> None:
    suite = small_suite()
    assert names_of("miniwob", suite) == ["miniwob/choose-date", "miniwob/click-test"]
    assert names_of("miniwob/click-*", suite) == ["miniwob/click-test"]
    assert names_of("miniwob/c[hl]*", suite) == ["miniwob/choose-date", "miniwob/click-test"]
    assert names_of("miniwob/click-test", suite) == ["miniwob/click-test"]
    with pytest.raises(UnknownTask, match=r"miniwob/clik-test is not .*closest: miniwob/click-test"):
        names_of("miniwob/clik-test", suite)
    with pytest.raises(UnknownTask, match="left out of the MiniWoB.. suite: real time"):
        names_of("miniwob/stock-market", suite)
    with pytest.raises(UnknownTask, match="matches no MiniWoB"):
        names_of("miniwob/zz*", suite)


def test_every_task_directory_comes_from_one_template(tmp_path: Path) -> None:
    task = Task("circle-center", "Find the center of a circle.", continuous=True)
    files = task_files(task, "1.1.0", 0.8)
    assert set(files) == {"task.toml", "instruction.md", "environment/Dockerfile", "environment/start.sh",
                          "tests/test.sh"}  # fmt: skip
    toml = tomllib.loads(files["task.toml"])
    assert toml["task"]["name"] == "miniwob/circle-center"
    assert toml["metadata"] | {"ready_probe": ""} == {
        "suite": "miniwob", "miniwob_version": "1.1.0", "miniwob_task": "circle-center", "threshold": 0.8,
        "start_url": "http://127.0.0.1:8000/", "ready_probe": "",
    }  # fmt: skip
    assert toml["metadata"]["ready_probe"].endswith("-m cua_stream.tasks.ready --port 8000 --arm")
    assert toml["agent"]["timeout_sec"] > 0 and toml["verifier"]["timeout_sec"] > 0
    assert (
        "yellow banner" in files["instruction.md"]
        and "Find the center of a circle." in files["instruction.md"]
    )
    assert "ENV CUA_TASK=miniwob/circle-center CUA_MINIWOB_VERSION=1.1.0" in files["environment/Dockerfile"]
    assert "--task miniwob/circle-center" in files["environment/start.sh"]
    assert "--miniwob-version 1.1.0" in files["environment/start.sh"]
    assert "--task miniwob/circle-center --port 8000 --threshold 0.8" in files["tests/test.sh"]
    suite = Suite("1.1.0", (task,), ())
    (written,) = export(suite, tmp_path, {"circle-center": 0.8})
    assert (written / "task.toml").read_text() == files["task.toml"]
    assert os.access(written / "environment/start.sh", os.X_OK) and os.access(
        written / "tests/test.sh", os.X_OK
    )


def test_thresholds_are_per_task_and_raw_rewards() -> None:
    suite = small_suite()
    assert thresholds_for(suite, 1.0, {"click-test": 0.5}) == {"choose-date": 1.0, "click-test": 0.5}
    with pytest.raises(UnknownTask, match="clik-test .*closest to clik-test: click-test"):
        thresholds_for(suite, 1.0, {"clik-test": 0.5})
    with pytest.raises(ValueError, match=r"in \[-1, 1\]"):
        thresholds_for(suite, 2.0, {})


def test_a_directory_from_another_version_is_refused_naming_both(tmp_path: Path) -> None:
    have = package.installed().version
    (task,) = installed_suite().tasks[:1]
    export(Suite(have, (task,), ()), tmp_path / "now", {task.name: 1.0})
    export(Suite("0.9", (task,), ()), tmp_path / "old", {task.name: 1.0})
    assert check_exported(tmp_path / "now" / task.name) == f"miniwob/{task.name}"
    with pytest.raises(TaskVersionMismatch, match=f"exported from MiniWoB.. 0.9, but {have} is installed"):
        check_exported(tmp_path / "old" / task.name)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "task.toml").write_text('[task]\nname = "mine"\n')
    assert check_exported(tmp_path / "mine") is None  # not MiniWoB++'s: nothing to check


def test_the_verdict_is_the_page_raw_reward_against_the_threshold() -> None:
    wob = lambda raw: {"wob": {"raw": raw, "reward": raw / 2, "reason": "r", "ms": 5.0}}  # noqa: E731
    assert verdict([{"painted": {}}, wob(1.0)]).rewards() == {"reward": 1.0, "raw": 1.0}
    assert verdict([wob(0.93)]).rewards() == {"reward": 0.0, "raw": 0.93}  # binary by default
    assert verdict([wob(0.93)], threshold=0.9).rewards() == {"reward": 1.0, "raw": 0.93}
    assert verdict([wob(-1.0)], threshold=-1.0).reward == 1.0
    left = verdict([{"left": "the page was left"}, wob(1.0)])
    assert left.rewards() == {"reward": 0.0} and "left before the page scored" in left.why
    assert verdict([wob(1.0), {"left": "later"}]).reward == 1.0  # decided before
    assert verdict([{"painted": {}}, {"armed": True}]).why == "the page never ended the episode"


ORIGIN, HOST = "http://127.0.0.1:8000", "127.0.0.1:8000"


def post(ep: Episode, path: str, body: object, *, origin: str | None = ORIGIN, ctype: str = "application/json",
         token: str | None = None) -> int:  # fmt: skip
    data = body if isinstance(body, bytes) else json.dumps({"token": token or ep.token, **body}).encode()  # type: ignore[dict-item]
    return ep.post(path, origin, HOST, ctype, data)


def test_the_server_takes_one_reward_report_from_the_wrapper_page_only(tmp_path: Path) -> None:
    ep = Episode("click-test", 7, tmp_path)
    report = {"wob": {"raw": 1.0, "reward": 0.8, "reason": None, "ms": 120}}
    assert post(ep, "/state", report, origin=None) == 403  # not a browser page's
    assert post(ep, "/state", report, origin="null") == 403  # a data: URL's page
    assert post(ep, "/state", report, origin="http://127.0.0.1:9") == 403  # another origin
    assert post(ep, "/state", report, token="guessed") == 403
    assert post(ep, "/state", b"raw=1", ctype="application/x-www-form-urlencoded") == 415  # a form
    assert post(ep, "/state", b"{not json") == 400
    assert post(ep, "/state", {"wob": {"raw": 2.0, "reward": 1.0}}) == 400  # not a MiniWoB++ reward
    assert post(ep, "/state", {"wob": {"raw": float("nan"), "reward": 1.0}}) == 400
    assert post(ep, "/state", {"something": "else"}) == 400
    assert ep.state.snapshot() == []
    assert post(ep, "/state", report) == 204
    assert post(ep, "/state", report) == 409  # one report per episode
    assert post(ep, "/state", {"left": "x"}) == 409
    assert ep.state.snapshot() == [{"wob": {"raw": 1.0, "reward": 0.8, "reason": None, "ms": 120.0}}]
    assert "This episode has ended" in ep.front_page() and ep.token not in ep.front_page()


def test_a_reload_after_the_episode_started_is_leaving_it(tmp_path: Path) -> None:
    ep = Episode("click-test", 7, tmp_path)
    assert ep.token in ep.front_page() and ep.token in ep.front_page()  # the harness's loads: free
    assert post(ep, "/painted", {"frame": [240, 20, 320, 420], "zoom": 2, "viewport": [800, 510]}) == 204
    assert ep.state.painted.is_set()
    assert ep.post("/armed", ORIGIN, HOST, "", b"") == 403  # a page cannot arm
    assert ep.post("/armed", None, HOST, "", b"") == 204  # the ready probe
    ep.front_page()
    events = ep.state.snapshot()
    assert events[0] == {"painted": {"frame": [240, 20, 320, 420], "zoom": 2, "viewport": [800, 510]}}
    assert events[1:] == [
        {"armed": True},
        {"left": "the task's page was loaded again after the episode started"},
    ]
    assert verdict(events).reward == 0.0


def test_the_wrapper_page_seeds_zooms_and_holds_the_task_unmodified() -> None:
    html = page("click-test", 42, "tok")
    assert '"/mw/miniwob/click-test.html"' in html and "zoom:2" in html
    assert 'Math.seedrandom(NAME + ":" + SEED)' in html and '"click-test"' in html and '"42"' in html
    assert "core.startEpisodeReal()" in html and "EPISODE_MAX_TIME = MAX_MS" in html and "86400000" in html


def test_static_files_stay_under_the_package_html(tmp_path: Path) -> None:
    html = tmp_path / "html"
    (html / "core").mkdir(parents=True)
    (html / "core" / "core.js").write_text("var core = {};")
    (tmp_path / "secret").write_text("no")
    (html / "core" / "out").symlink_to(tmp_path / "secret")
    assert static_file(html, "core/core.js") == (html / "core" / "core.js").resolve()
    assert static_file(html, "core%2Fcore.js") == (html / "core" / "core.js").resolve()
    for bad in ("../secret", "core/../../secret", "%2e%2e/secret", "core/out", "core", "", "core//core.js",
                "core\\core.js", "/etc/passwd", "core/core.js%00"):  # fmt: skip
        assert static_file(html, bad) is None, bad


def test_the_package_missing_is_one_line_naming_the_setup_step(tmp_path: Path) -> None:
    (tmp_path / "miniwob.py").write_text("")  # shadows the installed package: a module, not its directory
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "COLUMNS": "300"}
    done = subprocess.run([sys.executable, "-m", "cua_stream", "tasks", "export", "miniwob", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: MiniWoB++ (the miniwob package) is not installed: run scripts/setup.sh (it installs "
        "miniwob, pinned with its hash, without its dependencies)"
    ]
    with pytest.raises(MiniwobMissing):
        subprocess_free_missing(tmp_path)


def subprocess_free_missing(shadow: Path) -> None:
    sys.path.insert(0, str(shadow))
    try:
        package.installed()
    finally:
        sys.path.remove(str(shadow))
        sys.modules.pop("miniwob", None)


def test_suite_names_resolve_wherever_tasks_are_named(tmp_path: Path) -> None:
    from cua_stream.evaluation.plan import resolve_tasks
    from cua_stream.events import TaskRef
    from cua_stream.tasks.refs import expand_tasks, task_ref

    suite = installed_suite()
    assert expand_tasks(["miniwob/use-slider*", "click-test"]) == [
        "miniwob/use-slider", "miniwob/use-slider-2", "click-test",
    ]  # fmt: skip
    assert expand_tasks(["miniwob"]) == [f"miniwob/{n}" for n in suite.names]
    assert task_ref("miniwob/use-slider") == TaskRef(name="miniwob/use-slider")  # the producers resolve it
    with pytest.raises(UnknownTask, match="closest: miniwob/use-slider"):
        task_ref("miniwob/use-slidr")
    # an exported directory is named as the suite names its task, with its path
    export(Suite(suite.version, suite.tasks[:2], ()), tmp_path, dict.fromkeys(suite.names[:2], 1.0))
    refs = resolve_tasks(f"{tmp_path}/*,miniwob/click-test")
    assert refs == [
        *(TaskRef(name=f"miniwob/{n}", path=str(tmp_path / n)) for n in suite.names[:2]),
        TaskRef(name="miniwob/click-test"),
    ]


def cli(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "cua_stream", *args], capture_output=True, text=True,
                          timeout=120, env=os.environ | {"COLUMNS": "300"})  # fmt: skip
    return done.returncode, " ".join((done.stdout + done.stderr).replace("│", " ").split())


def test_a_bad_task_name_is_one_line_with_the_closest_names_and_exit_2() -> None:
    code, said = cli(
        "eval", "run", "--tasks", "miniwob/clik-test", "--policy", "nothing", "--bootstrap", "127.0.0.1:1"
    )
    assert code == 2 and "Invalid value for --tasks: miniwob/clik-test is not a MiniWoB++ task" in said
    assert "closest: miniwob/click-test, miniwob/click-test-2" in said
    code, said = cli(
        "trainer", "--run-id", "r", "--model-path", "/nowhere", "--tasks", "miniwob/stock-market"
    )
    assert code == 2 and "error: miniwob/stock-market is left out of the MiniWoB++ suite: real time" in said
    code, said = cli("learn", "--tasks", "miniwob/zz*")
    assert code == 2 and "miniwob/zz* matches no MiniWoB++ task" in said
    # tasks the teacher does not play: demonstrations of them are refused at once, not recorded as 0s
    code, said = cli("record-oracle", "--tasks", "miniwob/choose-date*")
    assert code == 2 and "the scripted policy oracle does not play miniwob/choose-date, " in said
    code, said = cli(
        "eval", "run", "--tasks", "miniwob/drag-shapes", "--policy", "oracle", "--bootstrap", "127.0.0.1:1"
    )
    assert code == 2 and "the scripted policy oracle does not play miniwob/drag-shapes" in said
    code, said = cli("tasks", "export", "webshop", "/tmp")
    assert code == 2 and "unknown suite 'webshop'; known: miniwob" in said


def test_an_episode_of_another_version_is_refused_where_it_runs(tmp_path: Path) -> None:
    from cua_stream.events import TaskRef
    from cua_stream.tasks.miniwob.site import episode_handler
    from producers.trial import task_path

    have = package.installed().version
    with pytest.raises(
        TaskVersionMismatch, match=f"exported from MiniWoB.. 0.9, but {have} is installed here"
    ):
        episode_handler("miniwob/click-test", 1, "0.9")  # the page server, in the episode
    with pytest.raises(UnknownTask, match="has no page 'no-such-task'"):
        episode_handler("miniwob/no-such-task", 1, have)
    assert episode_handler("miniwob/click-test", 1, have) is not None
    (task,) = [t for t in installed_suite().tasks if t.name == "click-test"]
    export(Suite("0.9", (task,), ()), tmp_path, {"click-test": 1.0})
    with pytest.raises(TaskVersionMismatch, match="0.9"):  # the producer, before any trial
        task_path(TaskRef(name="miniwob/click-test", path=str(tmp_path / "click-test")))


def test_the_docs_list_every_page_left_out() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "miniwob.md").read_text()
    table = docs.partition("| Page | Why it is left out |")[2].partition("\n\n")[0]
    for name in LEFT_OUT:
        assert f"| {name} |" in table, name
    assert "flight.AA, flight.Alaska, flight.Alaska-auto" in table
