"""Forged evaluation figures on the real broker: an ``EvalReport`` with negative counts or a rate of 1e15
(the dashboard showed "3.33 (-10/-3)" as a success rate) is refused at decode by every reader. The
dashboard counts it among the undecodable records instead of showing it; the readers of whole topics
(``eval follow``'s done versions, ``learn``'s tables) skip it."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from consumers.dashboard.board import Board
from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import read_into
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import EvalReport, EvalTask
from cua_stream.topics import EVALS
from tests.unit.samples import SAMPLES

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


def forged(run_id: str, overall: EvalTask) -> EvalReport:
    """The sample report under ``run_id`` with ``overall`` as its figures (the constructor checks how the
    figures relate, not their ranges: those are the decoder's, where records from anyone arrive)."""
    real: EvalReport = SAMPLES["eval_report"]  # type: ignore[assignment]
    return msgspec.structs.replace(real, run_id=run_id, tasks=(overall,))


async def test_forged_eval_figures_are_refused_at_decode_and_counted_not_shown(bus_config: BusConfig) -> None:
    real: EvalReport = SAMPLES["eval_report"]  # type: ignore[assignment]
    negative = EvalTask(task="overall", episodes=6, scored=-3, successes=-10, low=0.0, high=1.0)
    huge = EvalTask(task="overall", episodes=6, scored=5, successes=4, low=0.3, high=1e15)
    async with EventProducer(bus_config) as producer:
        for report in (forged("eval-negative", negative), real, forged("eval-huge", huge)):
            await producer.publish(EVALS, report)

    board, done = Board(), anyio.Event()
    with anyio.fail_after(60):
        await read_into(board, DashboardConfig(bus=bus_config, end="end"), done)
    assert done.is_set()
    assert list(board.evals) == [real.run_id]  # the real one shown, the forged ones not
    assert board.dead_letters == {"undecodable (seen by the dashboard)": 2}
    assert [d.event.run_id async for d in scan(bus_config, EVALS)] == [real.run_id]
