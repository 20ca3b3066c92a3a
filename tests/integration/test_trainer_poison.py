"""Records that decode but cannot be trained never stop the trainer: a turn whose version spans do not
cover its tokens, a call tree with a cycle, a NaN reward and a screenshot missing from the blob store
each drop their group as ``invalid_records`` and dead-letter the records at fault (their bytes as on the
log); records that do not decode at all are dead-lettered as such (on the policy topic, the run's own only); the groups around them train, and a
restart that reads them all again publishes none of it twice. Real broker, tiny model."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import msgspec
import pytest

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.bus.codec import OutRecord
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import (
    DeadLetter,
    GroupDropped,
    ImageRef,
    Reward,
    ScoreEvent,
    TrainStep,
    TurnEvent,
    VersionSpan,
    encode,
    to_json,
)
from cua_stream.topics import DLQ, POLICY, SCORES, TRAIN_STEPS, TURNS
from tests.conftest import wait_until
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_trainer_resume import RUN, episode_records

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.anyio]

GOOD = (0, 1, 6, 7)


def poisoned(group: int, episode: int) -> list[TurnEvent | ScoreEvent]:
    """Episode 0 of groups 2-5 carries one kind of poison; everything else is as the gateway writes it."""
    turn0, turn1, score = episode_records(group, episode)
    assert isinstance(turn0, TurnEvent) and isinstance(turn1, TurnEvent) and isinstance(score, ScoreEvent)
    if episode == 0 and group == 2:  # a span from -1: zip() raised and the trainer exited at every restart
        turn1 = msgspec.structs.replace(turn1, weight_versions=(VersionSpan(version=0, start=-1, end=4),))
    if episode == 0 and group == 3:  # c0 and c1 each other's parent, a leaf off the cycle: an endless walk
        leaf = msgspec.structs.replace(
            turn1, seq=2, call_id=f"{turn1.call_id}-leaf", parent_call_id=turn1.call_id
        )
        turn0 = msgspec.structs.replace(turn0, parent_call_id=turn1.call_id)
        return [turn0, turn1, leaf, score]
    if episode == 0 and group == 4:
        score = msgspec.structs.replace(score, verdict=Reward(value=math.nan))
    if episode == 0 and group == 5:  # a screenshot nobody stored
        turn1 = msgspec.structs.replace(turn1, images=(ImageRef(sha256="e" * 64, size=1, width=1, height=1),))
    return [turn0, turn1, score]


async def test_untrainable_records_drop_their_group_and_are_dead_lettered_once(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    sent: dict[str, bytes] = {}
    async with EventProducer(bus_config) as producer:
        # a group that never completes (its second episode never comes), then a record on each input
        # that does not decode, behind it in its partition: a restart resumes before them and reads them
        # again
        for event in episode_records(8, 0):
            await producer.send(SCORES if isinstance(event, ScoreEvent) else TURNS, event)
        open_group = f"{RUN}-g{8:06d}".encode()
        for spec in (TURNS, SCORES):
            garbage = OutRecord(bus_config.topics().name_of(spec), open_group, b"\xc1garbage", [])
            await producer.send_record(garbage)
        # on the policy topic, keyed by run: this run's is its trainer's to dead-letter, another's is not
        for run in (RUN.encode(), b"another-run"):
            await producer.send_record(
                OutRecord(bus_config.topics().name_of(POLICY), run, b"\xc1garbage", [])
            )
        for group in range(8):
            for episode in range(2):
                for event in poisoned(group, episode):
                    await producer.send(SCORES if isinstance(event, ScoreEvent) else TURNS, event)
                    sent[getattr(event, "call_id", f"score-{event.episode_id}")] = encode(event)
        await producer.flush()
    config = TrainerConfig(
        run_id=RUN,
        model_path=str(tiny_model_dir),
        group_size=2,
        groups_per_step=2,
        checkpoint_dir=str(tmp_path / "ckpt"),
        blob_dir=str(tmp_path / "blobs"),
        bus=bus_config,
    )

    async def run_until(done: Callable[[Trainer], Awaitable[bool]]) -> Trainer:
        trainer, stop = Trainer(config), anyio.Event()

        async def watch() -> None:
            await wait_until(lambda: done(trainer), poll_s=0.2)
            stop.set()

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                await trainer.run(stop=stop)
        return trainer

    async def decided(t: Trainer) -> bool:  # read (their dead letters go out with the stop's commit)
        return (
            t.state.step == 2
            and t.metrics.drops.value(reason="invalid_records") == 4
            and t.metrics.undecodable.value() == 3
        )

    await run_until(decided)
    records = [d.event async for d in scan(bus_config, TRAIN_STEPS)]
    steps = [r for r in records if isinstance(r, TrainStep)]
    assert sorted(g for s in steps for g in s.group_ids) == [f"{RUN}-g{g:06d}" for g in GOOD]
    drops = {r.group_id[-1]: r for r in records if isinstance(r, GroupDropped)}
    assert {g: d.reason for g, d in drops.items()} == dict.fromkeys("2345", "invalid_records")
    assert "do not cover its 4 completion tokens" in drops["2"].detail
    assert "form a cycle" in drops["3"].detail
    assert "is not a finite number" in drops["4"].detail
    assert "not in the blob store" in drops["5"].detail
    everything = [d.event async for d in scan(bus_config, DLQ)]
    assert all(isinstance(x, DeadLetter) for x in everything)
    undecodable = [x for x in everything if x.reason != "untrainable"]  # type: ignore[union-attr]
    assert sorted(x.source_topic.rsplit(".", 1)[-1] for x in undecodable) == ["policy", "scores", "turns"]  # type: ignore[union-attr]
    assert all(x.value == b"\xc1garbage" for x in undecodable)  # type: ignore[union-attr]
    assert sorted(x.key for x in undecodable) == sorted([open_group, open_group, RUN.encode()])  # type: ignore[union-attr]
    letters = [x for x in everything if x.reason == "untrainable"]  # type: ignore[union-attr]
    by_source = {x.source_topic.rsplit(".", 1)[-1]: [] for x in letters}  # type: ignore[union-attr]
    for x in letters:
        by_source[x.source_topic.rsplit(".", 1)[-1]].append(x)  # type: ignore[union-attr]
    # the span, the two calls of the cycle, and the missing screenshot's call: their bytes as sent
    turns_bytes = sorted(x.value for x in by_source["turns"])  # type: ignore[union-attr]
    g = lambda group, c: f"{RUN}-g{group:06d}-e0-c{c}"  # noqa: E731
    assert turns_bytes == sorted([sent[g(2, 1)], sent[g(3, 0)], sent[g(3, 1)], sent[g(5, 1)]])
    (nan_score,) = by_source["scores"]
    assert nan_score.value == sent[f"score-{RUN}-g000004-e0"]  # type: ignore[union-attr]
    assert all(x.trimmed == () for x in letters)  # type: ignore[union-attr]

    # A restart whose checkpoint still lists them as pending (as after a kill between the checkpoint
    # and the publishing) finds them on the log: nothing is dropped or dead-lettered twice.
    path = Path(config.checkpoint_dir) / ckpt.FILE
    saved = msgspec.json.decode(path.read_bytes(), type=ckpt.Checkpoint)
    pending = [to_json(e).decode() for e in [*drops.values(), *letters]]
    path.write_bytes(msgspec.json.encode(msgspec.structs.replace(saved, pending=pending)))

    async def settled(t: Trainer) -> bool:
        """The restart read the inputs' two undecodable records again (the open group holds their
        partitions back) and every record after them to the end of its inputs: whatever it would publish
        twice, it has read what would make it (and the loop's round that read it decides it before the
        stop is seen)."""
        inputs = t._inputs
        if t.metrics.undecodable.value() < 2 or inputs is None or inputs.live is None:
            return False
        return await inputs.caught_up(await inputs.end_offsets())

    second = await run_until(settled)
    assert second.state.step == 2
    assert len([d async for d in scan(bus_config, DLQ)]) == len(letters) + 3 == 8
    again = [d.event async for d in scan(bus_config, TRAIN_STEPS)]
    assert len([r for r in again if isinstance(r, GroupDropped)]) == 4
    assert second.metrics.undecodable.value() == 2  # read again, dead-lettered once
