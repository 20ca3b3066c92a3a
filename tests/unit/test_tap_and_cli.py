"""Tap rendering and filters (pure), and the CLI's error contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgspec
import pytest
from aiokafka.structs import ConsumerRecord

from cua_stream.bus.reader import Bound
from cua_stream.events import Event, TaskRef, encode, headers_for
from cua_stream.tap import Filter, printable, render_json, render_line
from tests.unit.samples import SAMPLES


def _msg(name: str, ev: Event | None = None) -> ConsumerRecord:
    ev = ev or SAMPLES[name]
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
        (
            "trainer_settings",
            "trainer_settings from step=5 settings=5 retrain_of=run-7 changed={'kl_coef': 0.3}",
        ),
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


EVIL = "x\x1b]0;pwned\x07\n12:00:00.000 cua.scores[0]@1 score ep=e reward=1 (ok)\r\x9b2J\x7f\u202e\x00"
"""A terminal title, a forged second line, a carriage return, an 8-bit CSI, DEL, a bidi override, NUL."""
UNSAFE = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))} | {"\u2028", "\u2029", "\u202e"}


def hostile(name: str) -> Event:
    ev = SAMPLES[name]
    match name:
        case "eval_report":
            task = msgspec.structs.replace(ev.tasks[0], task=EVIL)  # type: ignore[attr-defined]
            return msgspec.structs.replace(ev, policy=EVIL, of_run="", policy_version=None, tasks=(task,))
        case "work_request":
            return msgspec.structs.replace(ev, task=TaskRef(name=EVIL))
        case "outcome":
            return msgspec.structs.replace(ev, task=EVIL, rewards={EVIL: 1.0})  # a key too
        case "dead_letter":
            return msgspec.structs.replace(ev, reason=EVIL, error=EVIL)
        case "policy_version":
            return msgspec.structs.replace(ev, weights_path=EVIL)
    return msgspec.structs.replace(ev, reason=EVIL, detail=EVIL)  # group_dropped


def strings(doc: object) -> list[str]:
    """Every string in a JSON document, keys included."""
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in (k, *strings(v))]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return [doc] if isinstance(doc, str) else []


@pytest.mark.parametrize("name", ["eval_report", "work_request", "outcome", "dead_letter", "policy_version",
                                  "group_dropped"])  # fmt: skip
def test_tap_prints_no_control_character_of_a_record_in_either_format(name: str) -> None:
    ev = hostile(name)
    line = render_line(_msg(name, ev), ev, None)
    assert not UNSAFE & set(line), line  # before: the title was set, and a second tap line printed
    assert "x\\x1b]0;pwned\\x07\\n12:00:00.000" in line and "\\x9b2J\\x7f\\u202e\\x00" in line
    doc = render_json(_msg(name, ev), ev, None)
    assert not UNSAFE & set(doc) and doc.isascii()
    assert EVIL in strings(json.loads(doc))  # escaped, not lost
    undecodable = render_line(_msg(name, ev), None, f"bad bytes {EVIL}")
    assert not UNSAFE & set(undecodable) and "\n" not in undecodable


def test_printable_names_the_common_controls_and_escapes_the_rest() -> None:
    assert printable("a\tb\nc\rd") == "a\\tb\\nc\\rd"
    assert printable("\x1b[31m\x7f\x85\u2028é✓") == "\\x1b[31m\\x7f\\x85\\u2028é✓"  # printable text kept


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
