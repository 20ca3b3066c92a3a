"""The producer daemon against the real broker, gateway and reference engine (tiny Qwen3-VL), with the
scripted environment (no desktop: the desktop runs are in tests/desktop/): outcomes, attempts, commits,
admission, per-episode keys, failures, SIGTERM drain and abandon, kill -9 and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig, Secret
from cua_stream.events import Discard, OutcomeEvent, PolicyVersion, TaskRef, TurnEvent, WorkRequest
from cua_stream.gateway.config import GatewayConfig
from cua_stream.scoring import classify
from cua_stream.topics import EVAL_WORK, OUTCOMES, TURNS, WORK, TopicSpec
from producers.config import ProducerConfig
from producers.daemon import Producer
from tests.conftest import free_port, wait_until
from tests.integration.gateway_servers import EngineProcess, engine, serving, tiny_model_dir
from tests.integration.producer_support import events_of, publish, work_requests

__all__ = ["engine", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.anyio]

ADMIN_KEY = "gateway-admin-key"


@pytest.fixture
def keyed_gateway(engine: EngineProcess, bus_config: BusConfig, tmp_path: Path) -> Iterator[str]:
    """A gateway that requires its API key: the agent gets only its session's key."""
    from cua_stream.gateway.server import build_server

    config = GatewayConfig(
        model_path=str(engine.model_dir),
        engine_url=engine.url,
        port=free_port(),
        blob_dir=str(tmp_path / "blobs"),
        api_key=Secret(ADMIN_KEY),
    )
    with serving(build_server(config, bus_config)):
        yield f"http://127.0.0.1:{config.port}"


def work(run_id: str, groups: int, size: int, *, version: int = 0) -> list[WorkRequest]:
    return work_requests(run_id, groups, size, version=version)


async def outcomes(bus: BusConfig) -> list[OutcomeEvent]:
    return await events_of(bus, OUTCOMES, OutcomeEvent)


async def turns(bus: BusConfig) -> list[TurnEvent]:
    return await events_of(bus, TURNS, TurnEvent)


async def committed(bus: BusConfig, group: str, topic: TopicSpec = WORK) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bus.bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(o.offset for tp, o in offsets.items() if tp.topic == bus.topics().name_of(topic))


async def run_lanes(
    lanes: dict[str, Producer], bus: BusConfig, *, until: int, through: dict[str, int]
) -> None:
    """The lanes' producers side by side until ``until`` outcomes are out and each lane's group has
    committed past ``through[lane]`` records of its lane's work topic: every record decided (run, with
    its outcome out first, or passed over), so whatever a lane would wrongly run has run by then."""
    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            for p in lanes.values():
                await tg.start(lambda task_status, p=p: p.run(stop=stop, task_status=task_status))

            async def settled() -> bool:
                for lane, p in lanes.items():
                    if await committed(bus, p.config.group, p.config.work_topic) < through[lane]:
                        return False
                return len(await outcomes(bus)) >= until

            await wait_until(settled, 0.5)
            stop.set()


async def test_each_work_request_gets_one_outcome_its_turns_share_the_attempt_and_commits_follow(
    bus_config: BusConfig, keyed_gateway: str
) -> None:
    requests = work("prod", 2, 3)
    await publish(bus_config, *requests)
    config = ProducerConfig(
        gateway_url=keyed_gateway,
        gateway_api_key=Secret(ADMIN_KEY),
        environment="scripted",
        max_turns=2,
        concurrency=3,
        bus=bus_config,
    )
    producer = Producer(config)
    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            await tg.start(lambda task_status: producer.run(stop=stop, task_status=task_status))

            async def all_out() -> bool:
                return len(await outcomes(bus_config)) >= len(requests)

            await wait_until(all_out, 0.5)
            stop.set()
    got = await outcomes(bus_config)
    assert sorted(o.episode_id for o in got) == sorted(w.episode_id for w in requests)  # one each
    by_episode = {o.episode_id: o for o in got}
    recorded = await turns(bus_config)
    for episode_id, o in by_episode.items():
        mine = [t for t in recorded if t.episode_id == episode_id]
        assert o.attempt > 1_600_000_000_000  # a start time in ms: unique per run
        assert {t.attempt for t in mine} == {o.attempt} and len(mine) == o.n_calls >= 1
        assert o.n_turns == len(mine) and o.agent_started
        classify(o)  # every outcome has a row in the scoring table
    assert len({o.attempt for o in got}) == len(got)
    assert await committed(bus_config, config.group) == len(requests)  # every request, after its outcome
    text = producer.metrics.registry.render()
    assert f"cua_producer_turns_total {sum(o.n_turns for o in got)}\n" in text
    assert "cua_producer_episodes_finished_total{" in text


async def test_stale_work_is_not_run_and_says_why(bus_config: BusConfig, keyed_gateway: str) -> None:
    await publish(
        bus_config, PolicyVersion(run_id="stale", version=5, weights_path="/w", step=5, published_at=0.0)
    )
    old, fresh = work("stale", 1, 1, version=1)[0], work("stale", 2, 1, version=4)[1]
    await publish(bus_config, old, fresh)
    config = ProducerConfig(
        gateway_url=keyed_gateway,
        gateway_api_key=Secret(ADMIN_KEY),
        environment="scripted",
        max_turns=1,
        max_staleness=1,
        bus=bus_config,
    )
    producer = Producer(config)
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            await tg.start(lambda task_status: producer.run(stop=stop, task_status=task_status))

            async def both() -> bool:
                return len(await outcomes(bus_config)) >= 2

            await wait_until(both, 0.3)
            stop.set()
    got = {o.episode_id: o for o in await outcomes(bus_config)}
    refused = got[old.episode_id]
    assert refused.early_termination_reason == "not_run:stale" and refused.n_calls == 0
    assert classify(refused)[1].reason == "stale"
    assert (
        got[fresh.episode_id].n_calls == 1
        and got[fresh.episode_id].early_termination_reason == "max_turns_reached"
    )
    assert {t.episode_id for t in await turns(bus_config)} == {fresh.episode_id}


async def test_work_naming_a_task_outside_the_task_roots_is_answered_and_never_run(
    bus_config: BusConfig, keyed_gateway: str, tmp_path: Path
) -> None:
    """The producer daemon with one task root (its config file's ``task_roots``): work naming a task
    elsewhere on its host (by its path, through ``..``, through a link inside the root) gets a
    ``not_run:task_not_allowed`` outcome, scored a discard, and makes no call; a task under the root and
    a bundled one run."""
    root, evil = tmp_path / "tasks", tmp_path / "evil-task"
    for task in (root / "mine", evil):
        task.mkdir(parents=True)
        (task / "task.toml").write_text("[task]\n")
    (root / "escape").symlink_to(evil, target_is_directory=True)
    paths = {
        "mine": root / "mine",
        "evil": evil,
        "dotdot": f"{root}/mine/../../evil-task",
        "escape": root / "escape",
    }
    *requests, bundled = work("roots", len(paths) + 1, 1)  # the last: click-button, by name
    named = {name: msgspec.structs.replace(w, task=TaskRef(name=name, path=str(path)))
             for w, (name, path) in zip(requests, paths.items(), strict=True)}  # fmt: skip
    requests.append(bundled)
    await publish(bus_config, *named.values(), bundled)
    config = tmp_path / "producer.toml"
    config.write_text(f"[producer]\nmax_turns = 1\ntask_roots = [{str(root)!r}]\n")
    proc = producer_cli(bus_config, keyed_gateway, tmp_path / "producer.log", "--config", str(config))
    try:
        with anyio.fail_after(120):

            async def all_answered() -> bool:
                return len(await outcomes(bus_config)) >= len(requests)

            await wait_until(all_answered, 0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    got = {o.episode_id: o for o in await outcomes(bus_config)}
    assert sorted(got) == sorted(w.episode_id for w in requests)  # one outcome each
    refused = [got[named[name].episode_id] for name in ("evil", "dotdot", "escape")]
    for outcome in refused:
        assert outcome.early_termination_reason == "not_run:task_not_allowed", outcome
        assert not outcome.agent_started and outcome.n_calls == 0 and outcome.exception is None
        assert classify(outcome)[1] == Discard(reason="task_not_allowed")
    ran = {named["mine"].episode_id, bundled.episode_id}
    assert all(got[e].agent_started and got[e].n_calls == 1 for e in ran)
    assert {t.episode_id for t in await turns(bus_config)} == ran  # the refused ones made no call at all


async def test_without_a_gateway_each_episode_still_ends_with_an_outcome(bus_config: BusConfig) -> None:
    requests = work("nogw", 1, 2)
    await publish(bus_config, *requests)
    config = ProducerConfig(
        gateway_url=f"http://127.0.0.1:{free_port()}", environment="scripted", concurrency=2, bus=bus_config
    )
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            await tg.start(lambda task_status: Producer(config).run(stop=stop, task_status=task_status))

            async def done() -> bool:
                return len(await outcomes(bus_config)) >= 2

            await wait_until(done, 0.5)
            stop.set()
    got = await outcomes(bus_config)
    assert sorted(o.episode_id for o in got) == sorted(w.episode_id for w in requests)
    for o in got:
        assert o.exception is not None and o.exception.type == "ConnectError" and not o.agent_started
        assert o.exception.phase == "agent_setup"


def producer_cli(
    bus: BusConfig, gateway_url: str, log: Path, *options: str, **env: str
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "cua_stream",
        "producer",
        "--environment",
        "scripted",
        "--gateway-url",
        gateway_url,
    ]
    args += [
        "--bootstrap",
        bus.bootstrap_servers,
        "--prefix",
        bus.topic_prefix,
        "--concurrency",
        "2",
        *options,
    ]
    with log.open("ab") as out:
        return subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CUA_PRODUCER_GATEWAY_API_KEY": ADMIN_KEY, **env},
        )


def cli_group(bus: BusConfig) -> str:
    """The work topic's consumer group of ``producer_cli``'s producers (the training lane's)."""
    return ProducerConfig(gateway_url="http://127.0.0.1:1", environment="scripted", bus=bus).group


async def test_sigterm_drains_a_second_sigterm_abandons_and_nothing_is_lost(
    bus_config: BusConfig, keyed_gateway: str, tmp_path: Path
) -> None:
    requests = work("term", 2, 2)
    await publish(bus_config, *requests)
    slow = {"CUA_PRODUCER_MAX_TURNS": "30", "CUA_PRODUCER_SCRIPTED_ACTION_LATENCY_S": "0.5"}
    proc = producer_cli(bus_config, keyed_gateway, tmp_path / "producer.log", **slow)
    try:
        with anyio.fail_after(120):

            async def two_running() -> bool:
                return len({t.episode_id for t in await turns(bus_config)}) >= 2

            await wait_until(two_running, 0.3)
            at_term = len(await turns(bus_config))
            proc.send_signal(signal.SIGTERM)  # drain: the two in hand go on, nothing new starts

            async def went_on() -> bool:  # a turn of theirs recorded after the SIGTERM
                return len(await turns(bus_config)) > at_term

            await wait_until(went_on, 0.3)
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)  # abandon them
            await anyio.to_thread.run_sync(proc.wait)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, (tmp_path / "producer.log").read_text()[-3000:]
    first = await outcomes(bus_config)
    assert len(first) == 2
    assert all(classify(o)[1].reason == "abandoned" for o in first), [o.exception for o in first]
    # the two never started are still owed: a new producer runs them (and only them)
    proc = producer_cli(bus_config, keyed_gateway, tmp_path / "producer2.log", CUA_PRODUCER_MAX_TURNS="1")
    try:
        with anyio.fail_after(120):

            async def all_done() -> bool:  # and committed past every request: nothing more to run
                return (
                    len(await outcomes(bus_config)) >= 4
                    and await committed(bus_config, cli_group(bus_config)) == 4
                )

            await wait_until(all_done, 0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    got = await outcomes(bus_config)
    assert sorted(o.episode_id for o in got) == sorted(w.episode_id for w in requests)


async def test_kill_9_mid_episode_then_restart_loses_no_work_and_each_finished_attempt_has_one_outcome(
    bus_config: BusConfig, keyed_gateway: str, tmp_path: Path
) -> None:
    requests = work("kill", 2, 3)
    await publish(bus_config, *requests)
    slow = {"CUA_PRODUCER_MAX_TURNS": "3", "CUA_PRODUCER_SCRIPTED_ACTION_LATENCY_S": "1.0"}
    proc = producer_cli(bus_config, keyed_gateway, tmp_path / "p1.log", **slow)
    try:
        with anyio.fail_after(120):

            async def some_done_some_running() -> bool:
                done = {o.episode_id for o in await outcomes(bus_config)}
                started = Counter(t.episode_id for t in await turns(bus_config) if t.episode_id not in done)
                # one episode at its first turn: two more to go (>= 2 s, longer than reading the topics
                # takes), so the kill lands mid-episode
                return len(done) >= 1 and 1 in started.values()

            await wait_until(some_done_some_running, 0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = await outcomes(bus_config)
    proc = producer_cli(bus_config, keyed_gateway, tmp_path / "p2.log", CUA_PRODUCER_MAX_TURNS="1")
    try:
        with anyio.fail_after(180):

            async def every_request_answered() -> bool:  # and committed past it: nothing more to run
                answered = {o.episode_id for o in await outcomes(bus_config)}
                return (
                    answered == {w.episode_id for w in requests}
                    and await committed(bus_config, cli_group(bus_config)) == 6
                )

            await wait_until(every_request_answered, 0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    got = await outcomes(bus_config)
    per_attempt = Counter((o.episode_id, o.attempt) for o in got)
    assert set(per_attempt.values()) == {1}  # exactly one outcome per attempt that finished
    assert {o.episode_id for o in got} == {w.episode_id for w in requests}  # no request lost
    assert {(o.episode_id, o.attempt) for o in before} <= set(per_attempt)
    # the killed run's unfinished attempts left turns without an outcome: the trainer ignores them
    finished = set(per_attempt)
    orphans = {(t.episode_id, t.attempt) for t in await turns(bus_config)} - finished
    assert orphans, "the kill landed mid-episode, so some attempt has turns and no outcome"
    assert all(episode_id in {o.episode_id for o in got} for episode_id, _ in orphans)


async def test_training_and_evaluation_lanes_each_run_only_their_own_work(
    bus_config: BusConfig, keyed_gateway: str
) -> None:
    """Work of a training run on the work topic, of an evaluation (``eval-``) on eval_work: each lane's
    producer, in its own consumer group, reads its own topic and runs its own lane's work. A record of
    the other lane's runs written on a lane's topic (the evaluator may write eval_work, the trainer
    work) is passed over, committed past and never run."""
    training, evaluation = work("lanes", 1, 2), work("eval-lanes", 1, 2)
    await publish(bus_config, training[0], evaluation[0], training[1], evaluation[1])
    forged = {EVAL_WORK: work("lanes-forged", 1, 1)[0], WORK: work("eval-lanes-forged", 1, 1)[0]}
    async with EventProducer(bus_config) as out:
        for topic, record in forged.items():
            await out.publish(topic, record)
    base = ProducerConfig(gateway_url=keyed_gateway, gateway_api_key=Secret(ADMIN_KEY), environment="scripted",
                          max_turns=1, concurrency=2, bus=bus_config)  # fmt: skip
    lanes = {lane: Producer(msgspec.structs.replace(base, lane=lane)) for lane in ("train", "eval")}
    assert lanes["train"].config.group != lanes["eval"].config.group
    await run_lanes(lanes, bus_config, until=4, through={"train": 3, "eval": 3})
    got = await outcomes(bus_config)
    assert sorted(o.episode_id for o in got) == sorted(
        w.episode_id for w in training + evaluation
    )  # one each, none for the records on the other lane's topic
    for lane, p in lanes.items():
        assert "cua_producer_work_passed_over_total 1\n" in p.metrics.registry.render(), lane
        # past its own work and the other lane's record on its topic; nothing on the other topic
        assert await committed(bus_config, p.config.group, p.config.work_topic) == 3, lane
        other = EVAL_WORK if p.config.work_topic is WORK else WORK
        assert await committed(bus_config, p.config.group, other) == 0, lane


async def test_a_producer_limited_to_its_runs_leaves_a_stopped_runs_work_and_the_shared_group_alone(
    bus_config: BusConfig, keyed_gateway: str
) -> None:
    """Work a stopped command left on the topic (run ``gone``) before a new command's own (``mine``, its
    training work and its evaluation's): the new command's producers (``runs=["mine"]``, one per lane) run
    only ``mine``'s, each in a group of its own, and the lanes' shared groups commit nothing."""
    gone, mine, mine_eval = work("gone", 2, 1), work("mine-grpo", 1, 2), work("eval-mine-base", 1, 1)
    await publish(bus_config, *gone, mine[0], *mine_eval, mine[1])
    base = ProducerConfig(gateway_url=keyed_gateway, gateway_api_key=Secret(ADMIN_KEY), environment="scripted",
                          max_turns=1, concurrency=2, bus=bus_config, runs=["mine"])  # fmt: skip
    lanes = {lane: Producer(msgspec.structs.replace(base, lane=lane)) for lane in ("train", "eval")}
    await run_lanes(
        lanes, bus_config, until=3, through={"train": 4, "eval": 1}
    )  # the stopped run's decided too
    got = sorted(o.episode_id for o in await outcomes(bus_config))
    assert got == sorted(w.episode_id for w in mine + mine_eval)  # the stopped run's: none
    for lane, p in lanes.items():
        assert p.config.group.endswith(".mine"), lane
    # past its own work and the others' on its lane's topic (training's: the stopped run's too)
    assert await committed(bus_config, lanes["train"].config.group, WORK) == 4
    assert await committed(bus_config, lanes["eval"].config.group, EVAL_WORK) == 1
    shared = {"train": "producers", "eval": "eval-producers"}
    for lane in lanes:
        shared_group = f"{bus_config.topic_prefix}.{shared[lane]}"
        assert await committed(bus_config, shared_group, lanes[lane].config.work_topic) == 0, lane
