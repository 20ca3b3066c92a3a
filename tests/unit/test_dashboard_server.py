"""The dashboard server's pure helpers: ids outside the vocabulary shown as such, refusals logged once a
burst, strict JSON, and the stream settings checked at start."""

from __future__ import annotations

import json
import logging
import math

import pytest

from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import Refusals, StrictJSON, readable
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
