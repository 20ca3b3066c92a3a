"""Every inconsistency a record can carry is found when its group is judged: the group is dropped as
``invalid_records`` with the check's name, the records at fault are dead-lettered (their bytes as on the
log), the trainer takes its step on the good groups, and a restart that reads the bad group's records
again trains on without a second drop or letter. Before, each of these failed the step (the trainer
exited, and the restarted one failed on the same group), trained silently wrong (a NaN in every weight,
pixels at the wrong positions), or dropped the group with a bare OverflowError and no dead letter.

One case a test: the real daemon's loop (``Trainer``) on the real broker, the tiny model, and the
screenshots in a real blob store directory."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
import pytest
from PIL import Image

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import (
    DeadLetter,
    GroupDropped,
    ImageRef,
    Logprobs,
    Reward,
    ScoreEvent,
    TokenIds,
    TrainStep,
    TurnEvent,
    VersionSpan,
    encode,
)
from cua_stream.identity import group_id_of
from cua_stream.topics import DLQ, SCORES, TRAIN_STEPS, TURNS, partition_of
from tests.conftest import wait_until
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_trainer_resume import RUN, episode_records

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow, pytest.mark.anyio]

BAD = 1
"""The group carrying the case's poison (groups 0 and 2 train at step 1, 3 and 4 at step 2)."""
PAD, VISION_START, VISION_END = 151655, 151652, 151653
"""The tiny model's (Qwen3-VL's) image pad and the tokens the template puts around an image's pads."""

Episode = list[TurnEvent | ScoreEvent]


def gid(group: int) -> str:
    return group_id_of(RUN, group)


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (30, 120, 200)).save(out, "PNG")
    return out.getvalue()


def shown(turn: TurnEvent | ScoreEvent, refs: tuple[ImageRef, ...], *runs: int) -> TurnEvent:
    """``turn`` showing ``refs``, its prompt followed by one vision block per run of pads."""
    assert isinstance(turn, TurnEvent)
    prompt = list(turn.prompt_ids)
    for n in runs:
        prompt += [VISION_START, *[PAD] * n, VISION_END, 198]
    return msgspec.structs.replace(turn, prompt_ids=TokenIds(prompt), images=refs)


def stored(blobs: LocalBlobStore, data: bytes, width: int, height: int, grid: tuple[int, int, int] | None):
    return ImageRef(sha256=blobs.put(data), size=len(data), width=width, height=height, grid_thw=grid)


Poison = Callable[[LocalBlobStore, Episode, Episode], tuple[Episode, Episode, list[int]]]
"""The bad group's two episodes, as the gateway and scorer write them, poisoned: the episodes as sent,
and the records at fault (their indices in episode 0 + episode 1)."""


def no_grid_no_pads(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    # F1: the step failed with "Image features and image tokens do not match, tokens: 0, features: 4"
    e0[1] = shown(e0[1], (stored(blobs, png(64, 64), 64, 64, None),))
    return e0, e1, [1]


def grid_recorded_smaller(
    blobs: LocalBlobStore, e0: Episode, e1: Episode
) -> tuple[Episode, Episode, list[int]]:
    # F1: "image grids [[1, 4, 4]] differ from the recorded [[1, 2, 2]]", its one pad as recorded
    e0[1] = shown(e0[1], (stored(blobs, png(64, 64), 64, 64, (1, 2, 2)),), 1)
    return e0, e1, [1]


def pads_split(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    # two screenshots of 4 pads each, written 2 + 6: the step trained them at the wrong positions
    ref = stored(blobs, png(64, 64), 64, 64, (1, 4, 4))
    e0[1] = shown(e0[1], (ref, ref), 2, 6)
    return e0, e1, [1]


def screenshot_cut(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    e0[1] = shown(
        e0[1], (stored(blobs, png(64, 64)[:-30], 64, 64, (1, 4, 4)),), 4
    )  # "image file is truncated"
    return e0, e1, [1]


def screenshot_changed(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    ref = stored(blobs, png(64, 64), 64, 64, (1, 4, 4))
    blobs.path_of(ref.sha256).write_bytes(png(32, 32))  # the step's read raised BlobCorrupted
    e0[1] = shown(e0[1], (ref,), 4)
    return e0, e1, [1]


def screenshot_too_wide(
    blobs: LocalBlobStore, e0: Episode, e1: Episode
) -> tuple[Episode, Episode, list[int]]:
    # "absolute aspect ratio must be smaller than 200", from the processor in the step
    e0[1] = shown(e0[1], (stored(blobs, png(6400, 16), 6400, 16, (1, 2, 400)),), 200)
    return e0, e1, [1]


def root_without_prompt(
    blobs: LocalBlobStore, e0: Episode, e1: Episode
) -> tuple[Episode, Episode, list[int]]:
    e0[0] = msgspec.structs.replace(e0[0], prompt_ids=TokenIds())  # trained at position 0, with logprob 0
    return e0, e1, [0]


def logprob_never_sampled(
    blobs: LocalBlobStore, e0: Episode, e1: Episode
) -> tuple[Episode, Episode, list[int]]:
    e0[1] = msgspec.structs.replace(
        e0[1], completion_logprobs=Logprobs([-1000.0, -8.0, -8.0, -8.0])
    )  # NaN weights
    return e0, e1, [1]


def version_2_40(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    e0[1] = msgspec.structs.replace(e0[1], policy_version=2**40)  # F8: a bare OverflowError, no letter
    return e0, e1, [1]


def span_version_2_40(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    e0[1] = msgspec.structs.replace(
        e0[1], weight_versions=(VersionSpan(version=2**40, start=0, end=4),)
    )  # F8
    return e0, e1, [1]


def reward_1_7e308(blobs: LocalBlobStore, e0: Episode, e1: Episode) -> tuple[Episode, Episode, list[int]]:
    # F8: in every episode, the group's mean overflowed: a bare OverflowError, no letter
    e0[-1] = msgspec.structs.replace(e0[-1], verdict=Reward(value=1.7e308))
    e1[-1] = msgspec.structs.replace(e1[-1], verdict=Reward(value=1.7e308))
    return e0, e1, [2, 5]


CASES: dict[str, tuple[Poison, str]] = {
    "no-grid-no-pads": (no_grid_no_pads, "image_pads: call {c}: 0 image pads for 1 image(s) whose grids make 4"),
    "grid-recorded-smaller": (grid_recorded_smaller, "image_grid: call {c}: image {sha} is 64x64, grid [1, 4, 4]; recorded [1, 2, 2]"),
    "pads-split": (pads_split, "image_pads: call {c}: image 1 of 2: its 4 pads are not one run"),
    "screenshot-cut": (screenshot_cut, "image: call {c}: image {sha} does not decode (OSError"),
    "screenshot-changed-in-store": (screenshot_changed, "image: call {c}: image {sha} in the blob store does not match its hash"),
    "screenshot-too-wide": (screenshot_too_wide, "image: call {c}: image {sha} is 6400x16, which the image processor refuses"),
    "root-without-prompt": (root_without_prompt, "prompt: call {c}: a root call with an empty prompt"),
    "logprob-never-sampled": (logprob_never_sampled, "logprobs: call {c}: logprob -1000 is below -104"),
    "policy-version-2e40": (version_2_40, "versions: call {c}: version 1099511627776 is outside 0..2147483647"),
    "span-version-2e40": (span_version_2_40, "versions: call {c}: version 1099511627776 is outside 0..2147483647"),
    "reward-1.7e308-everywhere": (reward_1_7e308, "reward: the reward of {e0}, {e1} is not a finite number within ±1e+09"),
}  # fmt: skip


async def publish(bus: BusConfig, episodes: list[Episode]) -> None:
    async with EventProducer(bus) as producer:
        for episode in episodes:
            for event in episode:
                await producer.send(SCORES if isinstance(event, ScoreEvent) else TURNS, event)
        await producer.flush()


async def trained(bus: BusConfig) -> tuple[list[tuple[int, list[str]]], list[GroupDropped], list[DeadLetter]]:
    """The steps (number, groups), the drops and the dead letters on the log."""
    records = [d.event async for d in scan(bus, TRAIN_STEPS)]
    steps = [(r.step, sorted(r.group_ids)) for r in records if isinstance(r, TrainStep)]
    letters = [d.event async for d in scan(bus, DLQ)]
    assert all(isinstance(x, DeadLetter) for x in letters)
    return steps, [r for r in records if isinstance(r, GroupDropped)], letters  # type: ignore[return-value]


@pytest.mark.parametrize("case", list(CASES))
async def test_an_inconsistent_record_drops_its_group_at_judgement_and_the_trainer_goes_on(
    case: str, bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    poison, want = CASES[case]
    blobs = LocalBlobStore(tmp_path / "blobs")
    e0, e1, at_fault = poison(blobs, episode_records(BAD, 0), episode_records(BAD, 1))
    bad = [*e0, *e1]
    # A group that never completes, first on the bad group's partition: every restart reads from its first
    # record, so the bad group's records again.
    part = partition_of(gid(BAD).encode(), bus_config.episode_partitions)
    open_group = next(
        g for g in range(100, 200) if partition_of(gid(g).encode(), bus_config.episode_partitions) == part
    )
    await publish(bus_config, [episode_records(open_group, 0)])  # its second episode never comes
    await publish(
        bus_config,
        [*(episode_records(0, e) for e in (0, 1)), e0, e1, *(episode_records(2, e) for e in (0, 1))],
    )
    config = TrainerConfig(
        run_id=RUN,
        model_path=str(tiny_model_dir),
        group_size=2,
        groups_per_step=2,
        checkpoint_dir=str(tmp_path / "ckpt"),
        blob_dir=str(blobs.root),
        bus=bus_config,
    )
    first, stop = Trainer(config), anyio.Event()

    async def stepped_and_dropped() -> bool:  # in either order: the bad group may be judged after the step
        return first.state.step == 1 and first.metrics.drops.value(reason="invalid_records") == 1

    async def stop_then() -> None:
        await wait_until(stepped_and_dropped)
        stop.set()  # the drop and its letters go out with the stop's commit

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_then)
            await first.run(stop=stop)  # before, the step that took the bad group failed and raised here

    steps, drops, letters = await trained(bus_config)
    assert steps == [(1, [gid(0), gid(2)])]
    (dropped,) = drops
    sha = next((ref.sha256 for ev in e0 if isinstance(ev, TurnEvent) for ref in ev.images), "")
    c = bad[at_fault[0]].call_id if isinstance(bad[at_fault[0]], TurnEvent) else ""  # type: ignore[union-attr]
    detail = want.format(c=c, sha=sha, e0=e0[-1].episode_id, e1=e1[-1].episode_id)
    assert (dropped.group_id, dropped.reason) == (gid(BAD), "invalid_records")
    assert dropped.detail.startswith(detail), dropped.detail
    assert sorted(x.value for x in letters) == sorted(encode(bad[i]) for i in at_fault)  # type: ignore[misc]
    assert {(x.reason, x.error) for x in letters} == {("untrainable", f"group {gid(BAD)}: {dropped.detail}")}
    saved = ckpt.load(Path(config.checkpoint_dir))
    assert saved is not None and gid(BAD) in saved.decided
    resume = {(topic, partition): offset for topic, partition, offset in saved.offsets}
    assert all(resume[x.source_topic, x.partition] <= x.offset for x in letters)  # type: ignore[union-attr]

    # The restart reads the bad records again (behind the open group) and trains the next two groups.
    await publish(bus_config, [episode_records(g, e) for g in (3, 4) for e in (0, 1)])
    second = Trainer(msgspec.structs.replace(config, max_steps=2))
    with anyio.fail_after(240):
        await second.run()
    steps, drops, again = await trained(bus_config)
    assert steps == [(1, [gid(0), gid(2)]), (2, [gid(3), gid(4)])]
    assert drops == [dropped] and len(again) == len(letters)
    assert second.metrics.drops.value(reason="invalid_records") == 0
