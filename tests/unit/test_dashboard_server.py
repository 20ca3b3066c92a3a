"""The dashboard server's pure helpers: ids outside the vocabulary shown as such, refusals logged once a
burst, strict JSON, and the stream settings checked at start."""

from __future__ import annotations

import json
import logging
import math
import threading

import anyio
import pytest

from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import _cancellable, readable
from consumers.dashboard.web import Refusals, StrictJSON
from cua_stream.errors import ConfigError


def test_ids_outside_the_vocabulary_are_shown_between_good_runs() -> None:
    decode = lambda run: "".join(chr(96 + t) for t in run)  # noqa: E731
    assert readable([1, 2, -1, 3, 26, 27], decode, 27) == "ab⟨bad token id -1⟩cz⟨bad token id 27⟩"
    assert readable([], decode, 27) == ""


def test_a_burst_of_refusals_is_logged_once_then_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = Refusals(every_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for _ in range(500):
            refusals.refused(64)
        now[0] = 61.0
        refusals.refused(64)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "refused 1 live-stream connection(s): 64 open (dashboard.max_streams)",
        "refused 500 live-stream connection(s): 64 open (dashboard.max_streams)",
    ]
    assert refusals.total == 501


def test_json_answers_carry_non_finite_numbers_as_strings() -> None:
    body = StrictJSON({"a": math.nan, "b": [math.inf, -math.inf]}).body
    assert json.loads(body, parse_constant=lambda c: pytest.fail(c)) == {
        "a": "NaN",
        "b": ["Infinity", "-Infinity"],
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_streams", 0), ("stream_send_timeout_s", 0), ("stream_max_s", -1), ("max_connections", 64)],
)
def test_bad_stream_settings_fail_at_start_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"dashboard.{field}"):
        DashboardConfig(**{field: value})


@pytest.mark.anyio
async def test_a_rendering_in_a_worker_thread_stops_at_its_next_decode_once_its_request_is_cancelled() -> (
    None
):
    # a worker thread cannot be cancelled from outside; the rebuild's renderer asks at each decode (the slow
    # part), so a request whose client left stops rendering instead of holding a thread and the CPU
    calls: list[list[int]] = []
    decoding, cancelled = threading.Event(), threading.Event()

    def decode(ids: list[int]) -> str:
        calls.append(ids)
        decoding.set()
        cancelled.wait(10)  # the first decode lasts until the request has been cancelled
        return "x"

    text = _cancellable(decode)
    assert text is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, lambda: [text([i]) for i in range(1000)])
        assert await anyio.to_thread.run_sync(decoding.wait, 10)
        tg.cancel_scope.cancel()
        cancelled.set()
    assert calls == [[0]]  # before: all 1,000 ran on after the cancel
