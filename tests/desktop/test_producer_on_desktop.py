"""The producer on the real path: Harbor trials of computer-1 on the local desktop, the session gateway and
the reference engine (tiny Qwen3-VL), the real broker. A group runs with compaction forced by a small
context budget, and no agent's session key lands on a topic or in a trial's files; a killed X server is a
sandbox loss; a producer killed with -9 and restarted loses no work, gives each finished attempt one
outcome, and leaves no desktop behind."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import ClassVar

import anyio
import pytest
import uvicorn

from cua_stream.bus.reader import read_raw
from cua_stream.config import BusConfig, Secret
from cua_stream.events import CallKind, CallRecord, OutcomeEvent, SummaryEvent, TaskRef, WorkRequest
from cua_stream.scoring import classify
from cua_stream.tasks.policy_server import create_app
from cua_stream.topics import OUTCOMES, SUMMARIES, TURNS
from producers.config import ProducerConfig
from producers.daemon import Producer
from producers.episode import EpisodeResult, EpisodeRun
from producers.trial import TrialRunner
from tests.conftest import free_port, wait_until
from tests.integration.gateway_servers import GatewayProcess, engine, gateway, serving, tiny_model_dir
from tests.integration.producer_support import events_of, publish, work_requests

__all__ = ["engine", "gateway", "tiny_model_dir"]  # fixtures

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.harbor,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]


@pytest.fixture
def gateway_url(gateway: GatewayProcess) -> str:
    return gateway.url


def group(run_id: str, size: int) -> list[WorkRequest]:
    return work_requests(run_id, 1, size, max_new_tokens=24)


class KeySpy(TrialRunner):
    """The real trial runner, noting the session key each agent is given."""

    keys: ClassVar[list[str]] = []

    async def run(self, episode: EpisodeRun) -> EpisodeResult:
        KeySpy.keys.append(episode.session_key.reveal())
        return await super().run(episode)


def desktop_processes(trials: Path) -> list[str]:
    """The live desktops of the trials under ``trials``: each desktop's namespace is held by a wrapper that
    bind-mounts its trial's directories (and everything in it, Xvfb included, dies with that wrapper).
    Only this test's: another run's desktops on the machine are not its business."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if "mount --bind" in text and f"{trials}/" in text:
            found.append(text[:200])
    return found


async def test_a_group_runs_with_compaction_and_its_records_agree(
    bus_config: BusConfig, gateway_url: str, tmp_path: Path
) -> None:
    requests = group("desk", 3)
    await publish(bus_config, *requests)
    config = ProducerConfig(
        gateway_url=gateway_url,
        concurrency=3,
        max_turns=3,
        max_input_tokens=9000,  # under computer-1's 8,000-token headroom after one screenshot: it summarizes
        trials_dir=str(tmp_path / "trials"),
        bus=bus_config,
    )
    with anyio.fail_after(420):
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            producer = Producer(config, runner=KeySpy(config))
            await tg.start(lambda task_status: producer.run(stop=stop, task_status=task_status))

            async def all_out() -> bool:
                return len(await events_of(bus_config, OUTCOMES, OutcomeEvent)) >= len(requests)

            await wait_until(all_out, 1.0)
            stop.set()
    outcomes = await events_of(bus_config, OUTCOMES, OutcomeEvent)
    assert sorted(o.episode_id for o in outcomes) == sorted(w.episode_id for w in requests)
    summaries = await events_of(bus_config, SUMMARIES, SummaryEvent)
    calls: list[CallRecord] = [*await events_of(bus_config, TURNS, CallRecord), *summaries]
    for o in outcomes:
        assert o.agent_started, o.exception
        row, _ = classify(o)
        assert row.name in ("finished", "token_cap"), (row.name, o.exception)
        mine = [c for c in calls if c.episode_id == o.episode_id]
        assert {c.attempt for c in mine} == {o.attempt} and len(mine) == o.n_calls >= 1
        ids = {c.call_id for c in mine}
        assert len(ids) == len(mine) and all(c.parent_call_id in ids for c in mine if c.parent_call_id)
        assert sorted(c.seq for c in mine) == list(range(len(mine)))  # gap-free per episode
    # the small budget made computer-1 summarize: the summaries are recorded (and trained) like turns
    assert summaries and all(s.kind == CallKind.COMPACTION_SUMMARY for s in summaries)
    assert not desktop_processes(tmp_path / "trials")
    # each agent's session key: on no topic record, in no file of the trials (Harbor's results, logs,
    # trajectories), not even its first 12 characters
    assert len(KeySpy.keys) == len(requests)
    raw = b""
    for spec in (TURNS, SUMMARIES, OUTCOMES):
        async for m in read_raw(bus_config, bus_config.topics().name_of(spec)):
            raw += bytes(m.value or b"") + b"".join(v or b"" for _, v in m.headers)
    files = [f.read_bytes() for f in (tmp_path / "trials").rglob("*") if f.is_file()]
    assert raw and len(files) > 20
    for key in KeySpy.keys:
        assert key[:12].encode() not in raw and not any(key[:12].encode() in data for data in files)


async def test_killing_the_x_server_mid_episode_is_a_sandbox_loss(tmp_path: Path) -> None:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    runner = TrialRunner(ProducerConfig(trials_dir=str(tmp_path / "trials"), max_turns=40))
    work = group("xkill", 1)[0]
    episode = EpisodeRun(
        work=work,
        attempt=1,
        seed=3,
        session_url=f"http://127.0.0.1:{port}/policies/idle/click-button/3/v1",
        session_key=Secret("idle-policy-key"),
        context_length=32768,
    )
    # computer-1 writes a directory per turn into the trial's agent dir as it goes (its screenshots and
    # the episode's /logs arrive there only at the end)
    turn_2 = tmp_path / "trials" / f"{work.episode_id}.1" / "agent" / "episode-2"
    result = None
    with serving(server), anyio.fail_after(240):
        async with anyio.create_task_group() as tg:

            async def kill_x_after_two_turns() -> None:
                async def two_turns() -> bool:
                    return turn_2.exists()

                await wait_until(two_turns, 0.2)
                await anyio.run_process(["pkill", "-KILL", "-x", "Xvfb"])

            tg.start_soon(kill_x_after_two_turns)
            result = await runner.run(episode)
    outcome = result.outcome
    assert outcome.agent_started and outcome.exception is not None
    assert outcome.exception.type == "RuntimeRequestError" and outcome.exception.phase == "agent"
    row, verdict = classify(outcome)
    assert row.name == "sandbox_lost" and verdict.reason == "sandbox_lost"


async def test_kill_9_of_the_producer_mid_episode_then_a_restart(
    bus_config: BusConfig, gateway_url: str, tmp_path: Path
) -> None:
    requests = group("desk-kill", 3)
    await publish(bus_config, *requests)
    args = [
        sys.executable,
        "-m",
        "cua_stream",
        "producer",
        "--gateway-url",
        gateway_url,
        "--concurrency",
        "2",
    ]
    args += ["--bootstrap", bus_config.bootstrap_servers, "--prefix", bus_config.topic_prefix]
    args += ["--max-turns", "3", "--trials-dir", str(tmp_path / "trials")]

    def start(log: str) -> subprocess.Popen[bytes]:
        with (tmp_path / log).open("ab") as out:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    proc = start("p1.log")
    try:
        with anyio.fail_after(300):

            async def mid_episode() -> bool:
                return bool(await events_of(bus_config, TURNS, CallRecord))

            await wait_until(mid_episode, 0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for _ in range(100):  # the lifeline ends the killed producer's desktops
        if not desktop_processes(tmp_path / "trials"):
            break
        await anyio.sleep(0.1)
    assert not desktop_processes(tmp_path / "trials")
    proc = start("p2.log")
    try:
        with anyio.fail_after(400):

            async def answered() -> bool:
                got = await events_of(bus_config, OUTCOMES, OutcomeEvent)
                return {o.episode_id for o in got} == {w.episode_id for w in requests}

            await wait_until(answered, 1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    assert proc.returncode == 0, (tmp_path / "p2.log").read_text()[-3000:]
    outcomes = await events_of(bus_config, OUTCOMES, OutcomeEvent)
    assert set(Counter((o.episode_id, o.attempt) for o in outcomes).values()) == {1}
    assert {o.episode_id for o in outcomes} == {w.episode_id for w in requests}
    assert not desktop_processes(tmp_path / "trials")
    assert isinstance(requests[0].task, TaskRef)
