"""The gateway's engine slots: training's calls before evaluation's when both wait."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from cua_stream.gateway.priority import EVALUATION, TRAINING, EngineSlots, priority_of


async def take(slots: EngineSlots, priority: int, name: str, served: list[str], go: anyio.Event) -> None:
    async with slots.slot(priority):
        served.append(name)
        await go.wait()


async def settle() -> None:
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


def test_a_waiting_training_call_goes_before_evaluation_calls_that_waited_longer() -> None:
    async def main() -> list[str]:
        slots, served, go = EngineSlots(1), [], anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(take, slots, TRAINING, "train-1", served, go)
            await settle()
            for name, priority in (("eval-1", EVALUATION), ("eval-2", EVALUATION), ("train-2", TRAINING)):
                tg.start_soon(take, slots, priority, name, served, go)
                await settle()
            assert served == ["train-1"] and slots.waiting(EVALUATION) == 2 and slots.waiting(TRAINING) == 1
            go.set()
        assert slots.in_flight == 0
        return served

    assert anyio.run(main) == ["train-1", "train-2", "eval-1", "eval-2"]


def test_a_call_cancelled_while_waiting_leaves_no_slot_taken() -> None:
    async def main() -> None:
        slots, served, go = EngineSlots(1), [], anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(take, slots, TRAINING, "held", served, go)
            await settle()
            with anyio.move_on_after(0.05):
                await take(slots, EVALUATION, "gave-up", served, go)
            assert slots.waiting(EVALUATION) == 0 and slots.in_flight == 1
            go.set()
        assert served == ["held"] and slots.in_flight == 0
        async with slots.slot(EVALUATION):  # the slot is free again
            assert slots.in_flight == 1

    anyio.run(main)


def test_unbounded_nothing_waits_and_whose_a_call_is_follows_its_run() -> None:
    async def main() -> int:
        slots = EngineSlots(None)
        async with slots.slot(EVALUATION), slots.slot(EVALUATION), slots.slot(TRAINING):
            return slots.in_flight

    assert anyio.run(main) == 3
    assert priority_of("eval-train-f-v3") == EVALUATION and priority_of("learn-1-grpo") == TRAINING
    with pytest.raises(ValueError, match="engine_max_in_flight"):
        EngineSlots(0)
