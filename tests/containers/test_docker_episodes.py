"""Episodes in Harbor's own docker environment, on cua-stream's private Docker daemon with the locally
built images: a real Harbor ``Trial`` of computer-1 (``Qwen3VLComputer1`` through the binding) in a
container of a bundled task, against a gateway session and the reference engine (turns with screenshots
on the topic, the verifier inside the container, the outcome scored); the oracle solves every bundled
task in Docker and the idle policy scores 0; a container killed mid-episode is a sandbox loss, never a
hang; and a producer's orphaned containers are removed once a producer starts again."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import anyio.abc
import httpx
import msgspec
import pytest
import uvicorn

from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig, Secret
from cua_stream.containers.dockerd import DockerHome
from cua_stream.engine.config import EngineConfig
from cua_stream.events import Discard, OutcomeEvent, TaskRef, TurnEvent, WorkRequest
from cua_stream.gateway.config import GatewayConfig
from cua_stream.scoring import classify
from cua_stream.tasks import TASKS
from cua_stream.tasks.policy_server import create_app
from cua_stream.tasks.refs import task_ref
from cua_stream.topics import OUTCOMES, TURNS
from producers.config import ProducerConfig
from producers.environments import EPISODE, OWNER, owner_token, reap_orphans
from producers.episode import EpisodeRun
from producers.trial import TrialRunner
from tests.conftest import free_port, wait_until
from tests.containers.conftest import containers
from tests.integration.gateway_servers import GatewayProcess, engine, gateway, serving, tiny_model_dir
from tests.integration.producer_support import events_of, publish, work_requests

__all__ = ["engine", "gateway", "tiny_model_dir"]  # fixtures

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.containers,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

AT_ONCE = 3
"""Docker desktops at once on a 2-core machine (7 at once timed out computer-1's first 5 s check)."""


def work(run: str, task: str, index: int = 0) -> WorkRequest:
    return WorkRequest(run_id=run, group_id=f"{run}-g{index}", episode_id=f"{run}-{task}-e{index}",
                       task=TaskRef(name=task), sample_index=0, group_size=1, policy_version=0,
                       created_at=time.time())  # fmt: skip


def episode(request: WorkRequest, url: str, seed: int, key: str = "scripted-policy-key") -> EpisodeRun:
    return EpisodeRun(work=request, attempt=1, seed=seed, session_url=url, session_key=Secret(key),
                      context_length=32768)  # fmt: skip


def docker_config(tmp_path: Path, **over: object) -> ProducerConfig:
    return ProducerConfig(environment="docker", trials_dir=str(tmp_path / "trials"), **over)  # type: ignore[arg-type]


@pytest.mark.kafka
@pytest.mark.model
async def test_a_trial_runs_computer1_in_a_docker_container_through_the_gateway(
    docker_engine: DockerHome, bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from cua_stream.engine.server import build_server as engine_server
    from cua_stream.gateway.server import build_server as gateway_server

    engine = EngineConfig(model_path=str(tiny_model_dir), port=free_port())
    gateway = GatewayConfig(model_path=str(tiny_model_dir), engine_url=f"http://127.0.0.1:{engine.port}",
                            port=free_port(), blob_dir=str(tmp_path / "blobs"))  # fmt: skip
    url = f"http://127.0.0.1:{gateway.port}"
    request = work("dock", "click-test")
    runner = TrialRunner(docker_config(tmp_path, max_turns=2))
    with serving(engine_server(engine)), serving(gateway_server(gateway, bus_config)):
        async with httpx.AsyncClient() as http:
            session = {"run_id": request.run_id, "group_id": request.group_id, "episode_id": request.episode_id,
                       "attempt": 1, "sampling": {"temperature": 1.0, "max_new_tokens": 32}}  # fmt: skip
            opened = (await http.post(f"{url}/sessions", json=session)).json()
            with anyio.fail_after(300):
                result = await runner.run(
                    episode(request, f"{url}{opened['base_url']}", 5, opened["session_key"])
                )
            report = (await http.get(f"{url}/sessions/{opened['session_id']}")).json()
    outcome = result.outcome
    assert outcome.agent_started and outcome.exception is None, outcome.exception
    assert outcome.rewards == {"reward": 0.0}  # the verifier ran in the container: a random policy fails
    row, verdict = classify(outcome)
    assert row.name in ("finished", "token_cap") and verdict.value == 0.0  # type: ignore[union-attr]
    turns = [d.event async for d in scan(bus_config, TURNS) if isinstance(d.event, TurnEvent)]
    assert len(turns) == report["n_calls"] >= 1 and {t.episode_id for t in turns} == {request.episode_id}
    assert all(t.images for t in turns if t.parent_call_id is None)  # the container's screenshot went in
    assert result.env_start_s is not None and result.env_start_s > 0
    assert not containers(f"{EPISODE}={request.episode_id}")  # stopped and removed with its trial


async def test_the_oracle_solves_every_bundled_task_in_docker_and_the_idle_policy_scores_0(
    docker_engine: DockerHome, tmp_path: Path
) -> None:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    outcomes: dict[tuple[str, str], OutcomeEvent] = {}
    limiter = anyio.CapacityLimiter(AT_ONCE)

    async def one(runner: TrialRunner, policy: str, task: str, seed: int) -> None:
        async with limiter:
            url = f"http://127.0.0.1:{port}/policies/{policy}/{task}/{seed}/v1"
            result = await runner.run(episode(work(f"tasks-{policy}", task), url, seed))
            outcomes[policy, task] = result.outcome

    oracle = TrialRunner(docker_config(tmp_path / "oracle", max_turns=10))
    idle = TrialRunner(docker_config(tmp_path / "idle", max_turns=2))
    with serving(server), anyio.fail_after(900):
        async with anyio.create_task_group() as tg:
            for i, task in enumerate(TASKS):
                tg.start_soon(one, oracle, "oracle", task, 2000 + 37 * i)
                tg.start_soon(one, idle, "idle", task, 2000 + 37 * i)
    for task in TASKS:
        solved, idled = outcomes["oracle", task], outcomes["idle", task]
        assert solved.exception is None and solved.rewards == {"reward": 1.0}, (task, solved.exception)
        assert solved.early_termination_reason == "task_complete", task
        assert idled.exception is None and idled.rewards == {"reward": 0.0}, (task, idled.exception)
        assert classify(idled)[1].value == 0.0  # type: ignore[union-attr]
    assert not containers(OWNER)


async def test_a_container_killed_mid_episode_is_a_sandbox_loss(
    docker_engine: DockerHome, tmp_path: Path
) -> None:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    runner = TrialRunner(docker_config(tmp_path, max_turns=40))
    request = work("dkill", "click-button")
    turn_2 = tmp_path / "trials" / f"{request.episode_id}.1" / "agent" / "episode-2"
    with serving(server), anyio.fail_after(240):
        async with anyio.create_task_group() as tg:

            async def kill_after_two_turns() -> None:
                async def two_turns() -> bool:
                    return turn_2.exists()

                await wait_until(two_turns, 0.2)
                (container,) = containers(f"{EPISODE}={request.episode_id}")
                await anyio.run_process(["docker", "kill", container])

            tg.start_soon(kill_after_two_turns)
            url = f"http://127.0.0.1:{port}/policies/idle/click-button/3/v1"
            result = await runner.run(episode(request, url, 3))
    outcome = result.outcome
    assert outcome.agent_started
    _, verdict = classify(outcome)
    assert verdict == Discard(reason="sandbox_lost"), (outcome.exception, outcome.early_termination_reason)
    assert not containers(f"{EPISODE}={request.episode_id}")


async def test_containers_whose_producer_is_gone_are_removed_and_the_others_kept(
    docker_engine: DockerHome,
) -> None:
    dead = await anyio.open_process([sys.executable, "-c", "import time; time.sleep(60)"])
    dead_owner = owner_token(dead.pid)
    dead.kill()
    await dead.wait()

    def run(owner: str) -> str:
        cmd = ["docker", "run", "-d", "--network", "none", "--label", f"{OWNER}={owner}", "cua-tasks:local"]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()

    orphan, mine, elsewhere = run(dead_owner), run(owner_token()), run("other-host:1:1")
    try:
        removed = reap_orphans()
        left = {c[:12] for c in containers(OWNER)}
        assert orphan[:12] not in left and {mine[:12], elsewhere[:12]} <= left
        assert removed == [orphan[:12]]  # no compose project: the container itself
    finally:
        await anyio.run_process(["docker", "rm", "-f", orphan, mine, elsewhere], check=False)


def test_the_producer_refuses_to_start_without_a_docker_engine_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    cmd = [sys.executable, "-m", "cua_stream", "producer", "--environment", "docker", "-b", "127.0.0.1:1"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no Docker daemon answers" in done.stderr and "cua-stream containers start" in done.stderr


@pytest.mark.kafka
@pytest.mark.model
async def test_a_docker_producer_killed_with_sigkill_leaves_no_container_once_one_restarts(
    docker_engine: DockerHome, bus_config: BusConfig, gateway: GatewayProcess, tmp_path: Path
) -> None:
    requests = work_requests("dock-kill", 1, 2, max_new_tokens=24)
    await publish(bus_config, *requests)
    args = [sys.executable, "-m", "cua_stream", "producer", "--environment", "docker", "--gateway-url",
            gateway.url, "--concurrency", "2", "--max-turns", "3", "--trials-dir", str(tmp_path / "trials"),
            "--bootstrap", bus_config.bootstrap_servers, "--prefix", bus_config.topic_prefix]  # fmt: skip

    async def start(log: str) -> anyio.abc.Process:
        with (tmp_path / log).open("ab") as out:  # the child keeps its own copy of the descriptor
            return await anyio.open_process(args, stdout=out, stderr=subprocess.STDOUT)

    mine = {w.episode_id for w in requests}

    def episode_containers() -> list[str]:
        return [c for e in mine for c in containers(f"{EPISODE}={e}")]

    first = await start("p1.log")
    try:
        with anyio.fail_after(300):

            async def mid_episode() -> bool:
                return bool(await events_of(bus_config, TURNS, TurnEvent)) and bool(episode_containers())

            await wait_until(mid_episode, 0.5)
    finally:
        first.kill()
        await first.wait()
    left_behind = episode_containers()
    assert left_behind  # a SIGKILL gives Harbor no chance to stop its containers
    second = await start("p2.log")
    try:
        with anyio.fail_after(400):

            async def answered() -> bool:
                got = await events_of(bus_config, OUTCOMES, OutcomeEvent)
                return {o.episode_id for o in got} == mine

            await wait_until(answered, 1.0)
            assert not set(left_behind) & set(episode_containers())  # reaped when the second one started
    finally:
        second.terminate()
        with anyio.fail_after(120):
            await second.wait()
    assert second.returncode == 0, (tmp_path / "p2.log").read_text()[-3000:]
    assert "its producer" in (tmp_path / "p2.log").read_text()  # it says what it removed
    outcomes = await events_of(bus_config, OUTCOMES, OutcomeEvent)
    assert set(Counter((o.episode_id, o.attempt) for o in outcomes).values()) == {1}
    assert not episode_containers()
    images = (await anyio.run_process(["docker", "image", "ls", "--format", "{{.Repository}}"])).stdout
    assert b"dock-kill-" not in images  # the killed trials' images went with their containers


async def test_a_users_own_harbor_task_runs_unchanged_in_docker(
    docker_engine: DockerHome, tmp_path: Path
) -> None:
    task = tmp_path / "my-task"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text('[task]\nname = "me/my-task"\n\n[verifier]\ntimeout_sec = 60.0\n')
    (task / "instruction.md").write_text("Say you are done.\n")
    (task / "environment" / "Dockerfile").write_text(  # an image of the user's, not the bundled tasks'
        'FROM cua-desktop:local\nRUN echo "made by the task\'s own build" > /opt/made.txt\n'
        'ENTRYPOINT ["/usr/bin/tini", "--"]\n'
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\ngrep -q 'own build' /opt/made.txt && echo 1 > /logs/verifier/reward.txt\n"
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    request = msgspec.structs.replace(work("mine", "my-task"), task=task_ref(str(task)))
    runner = TrialRunner(docker_config(tmp_path, max_turns=3))
    with serving(server), anyio.fail_after(300):
        url = f"http://127.0.0.1:{port}/policies/nothing/click-test/1/v1"  # declares itself done at once
        outcome = (await runner.run(episode(request, url, 1))).outcome
    assert outcome.exception is None, outcome.exception
    assert outcome.rewards == {"reward": 1.0} and outcome.task == "me/my-task"
    assert not containers(f"{EPISODE}={request.episode_id}")
