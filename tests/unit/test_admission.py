"""Admission control: work naming a task outside the producer's task roots, or already too stale, is not
run; its reason-coded outcome is scored a discard of that reason."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from cua_stream.config import ConfigError
from cua_stream.events import Discard, DiscardReason, TaskRef, WorkRequest
from cua_stream.scoring import classify
from cua_stream.tasks import BUNDLED_DIR
from cua_stream.tasks.miniwob.export import exported_suite_root
from producers.admission import admission, not_run_outcome, task_allowed, within
from producers.config import producer_config


def work(version: int, task: TaskRef | None = None) -> WorkRequest:
    return WorkRequest(
        run_id="r", group_id="g", episode_id="e", task=task or TaskRef(name="t"), sample_index=0,
        group_size=2, policy_version=version, created_at=0.0,
    )  # fmt: skip


def test_work_older_than_the_bound_is_refused_and_scored_a_stale_discard() -> None:
    assert admission(work(8), latest_version=10, max_staleness=2, task_roots=()) is None
    assert admission(work(7), latest_version=10, max_staleness=2, task_roots=()) is DiscardReason.STALE
    assert admission(work(0), latest_version=99, max_staleness=None, task_roots=()) is None
    outcome = not_run_outcome(work(7), DiscardReason.STALE, attempt=0, now=5.0)
    assert outcome.early_termination_reason == "not_run:stale" and not outcome.agent_started
    row, verdict = classify(outcome)
    assert row.name == "not_run" and verdict == Discard(reason="stale")


@pytest.fixture
def hosts(tmp_path: Path) -> dict[str, Path]:
    """A task root with one task in it, a task outside it, and links from inside the root to both."""
    root, outside = tmp_path / "tasks", tmp_path / "evil-task"
    for task in (root / "mine", outside, tmp_path / "tasks-evil" / "x"):
        task.mkdir(parents=True)
        (task / "task.toml").write_text("[task]\n")
    (root / "link-out").symlink_to(outside, target_is_directory=True)
    (root / "link-in").symlink_to(root / "mine", target_is_directory=True)
    return {"root": root, "outside": outside, "tmp": tmp_path}


def test_a_task_path_must_resolve_under_a_root(hosts: dict[str, Path]) -> None:
    root, tmp = hosts["root"], hosts["tmp"]
    roots = (root.resolve(),)

    def allowed(path: str) -> bool:
        return task_allowed(TaskRef(name="x", path=path), roots)

    assert allowed(str(root / "mine")) and allowed(str(root))  # a task under a root, or a root itself
    assert allowed(str(root / "link-in"))  # a link that stays under the root
    assert not allowed(str(hosts["outside"]))  # anywhere else on the host
    assert not allowed(f"{root}/../evil-task") and not allowed(f"{root}/mine/../../evil-task")  # `..`
    assert not allowed(str(root / "link-out"))  # a link out of the root is where it leads
    assert not allowed(str(tmp / "tasks-evil" / "x"))  # a sibling whose name begins like the root's
    assert not allowed("tasks/mine")  # relative: whatever the producer's working directory holds
    assert task_allowed(TaskRef(name="click-test"), roots)  # no path: a bundled task by name
    assert task_allowed(TaskRef(name="x", path=""), roots)  # an empty path names no directory either


def test_within_compares_whole_path_components() -> None:
    assert within(Path("/srv/tasks/a"), (Path("/srv/tasks"),)) and within(
        Path("/srv/tasks"), (Path("/srv/tasks"),)
    )
    assert not within(Path("/srv/tasks-b"), (Path("/srv/tasks"),)) and not within(
        Path("/srv"), (Path("/srv/tasks"),)
    )
    assert not within(Path("/srv/tasks/a"), ())


def test_a_task_outside_the_roots_is_refused_first_and_scored_a_discard(hosts: dict[str, Path]) -> None:
    evil = work(7, TaskRef(name="evil-task", path=str(hosts["outside"])))
    roots = (hosts["root"].resolve(),)
    # refused whatever its version: the task is never run, fresh or stale
    assert (
        admission(evil, latest_version=7, max_staleness=2, task_roots=roots) is DiscardReason.TASK_NOT_ALLOWED
    )
    assert (
        admission(evil, latest_version=99, max_staleness=2, task_roots=roots)
        is DiscardReason.TASK_NOT_ALLOWED
    )
    outcome = not_run_outcome(evil, DiscardReason.TASK_NOT_ALLOWED, attempt=3, now=5.0)
    assert outcome.early_termination_reason == "not_run:task_not_allowed" and not outcome.agent_started
    row, verdict = classify(outcome)
    assert row.name == "not_run" and verdict == Discard(reason="task_not_allowed")


def test_the_roots_are_the_bundled_tasks_and_the_listed_directories(hosts: dict[str, Path]) -> None:
    default = producer_config({}, {})
    miniwob = Path(os.path.realpath(exported_suite_root()))  # the producers' own export of the suite
    assert default.task_roots == [] and default.task_root_paths() == (BUNDLED_DIR.resolve(), miniwob)
    assert task_allowed(
        TaskRef(name="click-test", path=str(BUNDLED_DIR / "click-test")), default.task_root_paths()
    )
    assert not task_allowed(TaskRef(name="mine", path=str(hosts["root"] / "mine")), default.task_root_paths())
    listed = producer_config({"producer": {"task_roots": [str(hosts["root"])]}}, {})
    assert task_allowed(TaskRef(name="mine", path=str(hosts["root"] / "mine")), listed.task_root_paths())
    # a command's own producer runs the task directories its arguments named, and only those
    mine = TaskRef(name="mine", path=str(hosts["outside"]))
    widened = default.allowing([mine, TaskRef(name="click-test"), mine])
    assert widened.task_roots == [str(hosts["outside"])] and default.allowing([TaskRef(name="x")]) is default
    assert task_allowed(mine, widened.task_root_paths())
    assert not task_allowed(TaskRef(name="mine", path=str(hosts["root"] / "mine")), widened.task_root_paths())


@pytest.mark.parametrize("root", ["/nonexistent/tasks", "", "FILE"])
def test_a_root_that_is_not_a_directory_fails_at_start_naming_the_field(root: str, tmp_path: Path) -> None:
    if root == "FILE":
        root = str(tmp_path / "a-file")
        Path(root).write_text("")
    with pytest.raises(ConfigError, match=r"^producer\.task_roots: .* is not a directory"):
        producer_config({"producer": {"task_roots": [root]}}, {})
    with pytest.raises(ConfigError, match=r"^producer\.task_roots: "):
        msgspec.structs.replace(producer_config({}, {}), task_roots=[root])
