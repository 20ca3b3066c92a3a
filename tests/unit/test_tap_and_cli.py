"""Tap rendering and filters (pure), and the CLI's error contract."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from aiokafka.structs import ConsumerRecord

from cua_stream.bus.reader import Bound
from cua_stream.events import encode, headers_for
from cua_stream.tap import Filter, render_json, render_line
from tests.unit.samples import SAMPLES


def _msg(name: str) -> ConsumerRecord:
    ev = SAMPLES[name]
    return ConsumerRecord("cua.x", 1, 42, 1700000000123, 0, b"k", encode(ev), None, 0, 0, headers_for(ev))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "turn",
            "turn ep=ep-3-1 seq=2 agent_turn call=call-2 parent=call-1 prompt+=6 completion=2 images=1 finish=stop v=4",
        ),
        ("summary", "summary ep=ep-3-1 seq=5 compaction_summary call=call-5 parent=root"),
        (
            "outcome",
            "outcome ep=ep-3-1 task=click-the-button rewards=None end=None exception=RuntimeRequestError@agent calls=6",
        ),
        ("score", "score ep=ep-3-1 reward=1 (ok)"),
        ("score_discard", "score ep=ep-3-1 DISCARD sandbox_lost"),
        ("work_request", "work_request ep=ep-3-1 group=grp-3 task=click-the-button sample=2/8 v=4"),
        ("policy_version", "policy_version v=5 step=5 weights=/ckpt/5"),
        ("train_step", "train_step step=5 v=5 groups=4 episodes=32 samples=40 loss=0.1250"),
        ("dead_letter", "dead_letter undecodable from cua.turns[1]@42: bad msgpack"),
    ],
)
def test_one_readable_line_per_event(name: str, expected: str) -> None:
    line = render_line(_msg(name), SAMPLES[name], None)
    assert "\n" not in line and " cua.x[1]@42 " in line
    assert expected in line


def test_undecodable_and_json_lines() -> None:
    assert "!undecodable: bad bytes" in render_line(_msg("turn"), None, "bad bytes")
    doc = render_json(_msg("score"), SAMPLES["score"], None)
    assert '"verdict":{"verdict":"reward","value":1.0,"reason":"ok"}' in doc and '"offset":42' in doc


def test_filters_match_headers_then_event_fields() -> None:
    f = Filter.parse(["type=turn", "type=summary", "group_id=grp-3"])
    headers = {"type": "turn", "episode_id": "ep-3-1"}
    assert f.matches(headers, SAMPLES["turn"])
    assert not f.matches({"type": "score"}, SAMPLES["score"])
    assert not Filter.parse(["group_id=other"]).matches(headers, SAMPLES["turn"])
    assert Filter.parse(["kind=compaction_summary"]).matches({}, SAMPLES["summary"])
    with pytest.raises(ValueError, match="field=value"):
        Filter.parse(["type"])


def test_range_bounds_parse() -> None:
    assert Bound.parse("17", default="beginning") == Bound("offset", 17)
    assert Bound.parse("@1700000000000", default="end") == Bound("time", 1700000000000)
    assert Bound.parse("2023-11-14T22:13:20+00:00", default="end") == Bound("time", 1700000000000)
    assert Bound.parse(None, default="end") == Bound("end")
    with pytest.raises(ValueError, match="timezone"):
        Bound.parse("2023-11-14T22:13:20", default="end")
    with pytest.raises(ValueError, match="bad range bound"):
        Bound.parse("yesterday", default="end")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cua_stream", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_bad_config_fails_at_start_naming_the_field() -> None:
    res = _cli("tap", "--bootstrap", "nohostport")
    assert res.returncode == 2 and "bus.bootstrap_servers" in res.stderr
    res = _cli("replay", "--topic", "rewards", "--out", "x.jsonl", "--bootstrap", "h:1")
    assert res.returncode == 2 and "unknown topic 'rewards'" in res.stderr
    res = _cli("replay", "--topic", "turns", "--bootstrap", "h:1")
    assert res.returncode == 2 and "exactly one of --out" in res.stderr


def test_cli_lists_its_commands() -> None:
    res = _cli("--help")
    assert res.returncode == 0
    for command in ("broker", "topics", "replay", "tap", "demo"):
        assert command in res.stdout


COST_MAP_PROBE = """
import os, sys
sys.argv = ["cua-stream", "topics", "--help"]
from cua_stream.cli import main
try:
    main()
except SystemExit:
    pass
print("cost map:", os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP"), file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "True"), ("False", "False")])
def test_every_command_keeps_litellm_off_the_network_unless_told(given: str | None, expected: str) -> None:
    # LiteLLM fetches its cost map from the internet on import unless this is set (~8 s and four
    # warnings where that is blocked); the CLI sets it before any command imports Harbor
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    if given is not None:
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = given
    done = subprocess.run(
        [sys.executable, "-c", COST_MAP_PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert f"cost map: {expected}" in done.stderr, done.stderr
