"""Where episodes run, decided before anything starts: the producer's environment names (its own and
Harbor's), each environment's Harbor config, the per-episode compose overlay (labels, no network), which
containers lost their producer, and the images' build contexts (what the tasks image carries imports only
the standard library: Debian's Python runs it)."""

from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path

import pytest

from cua_stream.config import Secret
from cua_stream.containers import images
from cua_stream.errors import ConfigError
from cua_stream.events import TaskRef, WorkRequest
from producers.config import ProducerConfig
from producers.environments import (
    ATTEMPT,
    EPISODE,
    OWNER,
    environment_config,
    orphaned,
    overlay,
    owner_token,
    process_start,
)
from producers.episode import EpisodeRun

ROOT = Path(__file__).resolve().parents[2]


def run(episode_id: str = "r-g0-e0", attempt: int = 7) -> EpisodeRun:
    work = WorkRequest(run_id="r", group_id="r-g0", episode_id=episode_id, task=TaskRef(name="click-test"),
                       sample_index=0, group_size=1, policy_version=0, created_at=time.time())  # fmt: skip
    return EpisodeRun(work=work, attempt=attempt, seed=11, session_url="http://x/v1", session_key=Secret("k"),
                      context_length=1000)  # fmt: skip


def test_any_harbor_environment_type_is_accepted_and_anything_else_named_in_the_error() -> None:
    for name in ("local-desktop", "scripted", "docker", "daytona", "modal", "e2b"):
        assert ProducerConfig(environment=name).environment == name
    with pytest.raises(
        ConfigError, match=r"producer.environment: 'dokker' is neither local-desktop nor scripted"
    ):
        ProducerConfig(environment="dokker")


def test_each_environment_gets_the_episodes_seed_and_desktop_size(tmp_path: Path) -> None:
    local = environment_config(ProducerConfig(), run(), tmp_path / "o.json")
    assert local.import_path.endswith(":LocalDesktopEnvironment")
    assert local.env == {"CUA_TASK_SEED": "11", "CUA_DESKTOP_SIZE": "800x600"}
    docker = environment_config(ProducerConfig(environment="docker"), run(), tmp_path / "o.json")
    assert docker.type == "docker" and docker.import_path is None and docker.env == local.env
    assert docker.extra_docker_compose == [tmp_path / "o.json"]
    written = json.loads((tmp_path / "o.json").read_text())["services"]["main"]
    assert written["network_mode"] == "none" and written["labels"][EPISODE] == "r-g0-e0"
    cloud = environment_config(
        ProducerConfig(environment="daytona", environment_options={"snapshot": "desk"}), run(), tmp_path / "x"
    )
    assert cloud.type == "daytona" and cloud.kwargs == {"snapshot": "desk"} and not (tmp_path / "x").exists()


def test_the_overlay_labels_the_container_and_takes_its_network_unless_asked() -> None:
    main = overlay(run(attempt=3), "h:1:2", "none")["services"]["main"]
    assert main == {"labels": {OWNER: "h:1:2", EPISODE: "r-g0-e0", ATTEMPT: "3"}, "network_mode": "none"}
    assert "network_mode" not in overlay(run(), "h:1:2", "task")["services"]["main"]


def test_a_container_is_orphaned_when_its_producer_process_is_gone() -> None:
    alive = {100: "555"}
    start_of = lambda pid: alive.get(pid, "")  # noqa: E731
    assert not orphaned("host:100:555", "host", start_of)  # its producer runs
    assert orphaned("host:100:444", "host", start_of)  # the pid was reused by another process
    assert orphaned("host:200:555", "host", start_of)  # gone
    assert not orphaned("other:200:555", "host", start_of)  # another host's: not ours to judge
    assert not orphaned("garbage", "host", start_of) and not orphaned("host:x:1", "host", start_of)


def test_this_process_owns_its_token() -> None:
    _, pid, start = owner_token().split(":")
    assert int(pid) > 0 and start == process_start(int(pid)) != ""
    assert process_start(2**22 + 12345) == ""  # no such process


def test_image_hashes_change_with_their_context_and_base() -> None:
    files = images.tasks_context()
    assert images.digest(files, "base-a") == images.digest(dict(files), "base-a")
    assert images.digest(files, "base-a") != images.digest(files, "base-b")
    assert images.digest(files) != images.digest({**files, "entrypoint.sh": b"changed"})
    assert {"Dockerfile", "entrypoint.sh", "opt/cua_stream/tasks/server.py"} <= set(files)
    desktop = images.desktop_context()
    assert b"xdotool" in desktop["packages.txt"] and b"BrowserSignin" in desktop["chromium-policy.json"]


def test_the_tasks_image_carries_only_standard_library_code() -> None:
    context = images.tasks_context()
    modules = {rel: data for rel, data in context.items() if rel.endswith(".py")}
    assert modules  # the task server's modules were found (an empty context holds every rule)
    for rel, data in modules.items():
        assert rel.startswith("opt/cua_stream/"), rel  # MiniWoB++'s own Python stays out
        for node in ast.walk(ast.parse(data)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from cua_stream import x`` imports the module cua_stream/x.py, which must be carried too
                submodules = [f"{node.module}.{a.name}" for a in node.names]
                names = [
                    node.module,
                    *(m for m in submodules if (ROOT / f"{m.replace('.', '/')}.py").is_file()),
                ]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("cua_stream", "__future__"), (rel, name)
                if top == "cua_stream":
                    module = f"opt/{name.replace('.', '/')}"
                    assert f"{module}.py" in context or f"{module}/__init__.py" in context, (rel, name)


def test_the_tasks_image_carries_miniwob_pages_and_version_but_none_of_its_python() -> None:
    from cua_stream.tasks.miniwob.package import installed

    package = installed()
    context = images.tasks_context()
    pages = {rel for rel in context if rel.startswith("opt/miniwob/")}
    assert "opt/miniwob/html/miniwob/click-test.html" in pages and "opt/miniwob/html/core/core.js" in pages
    assert len(pages) == sum(1 for p in package.html.rglob("*") if p.is_file())
    assert all(rel.startswith("opt/miniwob/html/") for rel in pages)
    metadata = context[f"opt/miniwob-{package.version}.dist-info/METADATA"].decode()
    assert f"Version: {package.version}" in metadata


def test_every_bundled_task_is_an_ordinary_harbor_docker_task() -> None:
    from cua_stream.tasks import TASKS, task_dir

    assert TASKS  # the bundled tasks were found (an empty list holds every rule)
    for task in TASKS:
        dockerfile = (task_dir(task) / "environment" / "Dockerfile").read_text()
        assert "ARG CUA_TASKS_IMAGE=cua-tasks:local" in dockerfile and "FROM ${CUA_TASKS_IMAGE}" in dockerfile
        assert f"ENV CUA_TASK={task}\n" in dockerfile


def test_a_task_is_a_bundled_name_or_any_harbor_task_directory(tmp_path: Path) -> None:
    from cua_stream.tasks.refs import expand_tasks, task_ref

    for name in ("a", "b"):
        (tmp_path / "set" / name).mkdir(parents=True)
        (tmp_path / "set" / name / "task.toml").write_text("[task]\n")
    assert task_ref("click-test") == TaskRef(name="click-test")
    assert task_ref(str(tmp_path / "set" / "a")) == TaskRef(name="a", path=str(tmp_path / "set" / "a"))
    assert task_ref("cua/click-test") == TaskRef(name="click-test")
    assert task_ref("open-settings") == TaskRef(name="open-settings")  # the producers' to resolve
    with pytest.raises(ValueError, match="without a task.toml"):
        task_ref(str(tmp_path / "set"))
    listed = [str(tmp_path / "set" / n) for n in ("a", "b")]
    assert expand_tasks([str(tmp_path / "set" / "*"), "click-test"]) == [*listed, "click-test"]
    assert expand_tasks([str(tmp_path / "set")]) == listed  # a dataset directory: its tasks
    with pytest.raises(ValueError, match="matches no task directory"):
        expand_tasks([str(tmp_path / "none-*")])


def test_the_trainer_refuses_a_directory_that_is_not_a_task_naming_the_field(tmp_path: Path) -> None:
    from consumers.trainer.config import TrainerConfig

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="trainer.tasks: .* is a directory without a task.toml"):
        TrainerConfig(run_id="r", model_path=str(tmp_path), tasks=[str(tmp_path)])
