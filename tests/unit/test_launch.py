"""Launch presets: what each produces is pinned (the source pull request's launch parity)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cua_stream.app.launch import PRESETS, agentic_train_args, preset, redacted, resolve
from cua_stream.config import ConfigError

SESSION_ARGV = [
    "--rollout-path", "session",
    "--use-session-server", "v2", "--use-session-images",
    "--tito-model", "qwen3_vl",
    "--max-seq-len", "32768",
]  # fmt: skip


def test_the_session_preset_mirrors_the_source_launch_and_generate_stays_unchanged() -> None:
    assert agentic_train_args(session_images=True) == ["--use-session-server", "v2", "--use-session-images"]
    assert agentic_train_args() == ["--use-session-server", "v2"]
    assert preset("session-qwen3vl").miles_argv() == SESSION_ARGV
    assert preset("default").miles_argv() == []  # the generate path: nothing added


def test_each_preset_resolves_to_pinned_daemon_settings() -> None:
    session = resolve(preset("session-qwen3vl"))
    assert session["launch"] == {
        "preset": "session-qwen3vl",
        "rollout_path": "session",
        "miles_argv": SESSION_ARGV,
    }
    assert session["gateway"]["context_length"] == 32768 and session["gateway"]["template_path"] == ""
    assert session["trainer"]["max_seq_len"] == 32768 and session["producer"]["max_input_tokens"] == 32768
    default = resolve(preset("default"))
    assert default["gateway"]["context_length"] == 0 and default["producer"]["max_input_tokens"] == 0
    assert default["launch"]["rollout_path"] == "generate"
    demo = resolve(preset("local-demo"))
    assert demo["trainer"]["group_size"] == 2 and demo["trainer"]["groups_per_step"] == 1
    assert demo["trainer"]["max_steps"] == 3 and demo["producer"]["concurrency"] == 2
    assert set(PRESETS) == {"default", "session-qwen3vl", "local-demo"}


def test_a_config_file_goes_over_the_preset_and_bad_keys_or_types_are_refused(tmp_path: Path) -> None:
    over = resolve(preset("session-qwen3vl"), {"producer": {"concurrency": 8}})
    assert over["producer"]["concurrency"] == 8 and over["producer"]["max_input_tokens"] == 32768
    with pytest.raises(ConfigError, match=r"producer\.concurency: unknown field \(from the config file\)"):
        resolve(preset("default"), {"producer": {"concurency": 8}})
    with pytest.raises(ConfigError, match="producer"):
        resolve(preset("default"), {"producer": {"concurrency": "many"}})
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        preset("nope")


def test_keys_never_print() -> None:
    shown = redacted(resolve(preset("default"), {"producer": {"gateway_api_key": "s3cret"}}))
    assert shown["producer"]["gateway_api_key"] == "***" and "s3cret" not in json.dumps(shown)
    assert shown["gateway"]["max_new_tokens_cap"] == 4096  # not a key


def test_the_cli_prints_every_daemon_and_writes_a_config_the_daemons_read(tmp_path: Path) -> None:
    out = tmp_path / "run.yaml"
    cmd = [
        sys.executable,
        "-m",
        "cua_stream",
        "launch",
        "--preset",
        "session-qwen3vl",
        "--print",
        "--write",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    shown = yaml.safe_load(res.stdout)
    assert set(shown) == {"engine", "gateway", "producer", "scorer", "trainer", "launch"}
    assert shown["launch"]["miles_argv"] == SESSION_ARGV
    from producers.config import producer_config

    written = yaml.safe_load(out.read_text())
    assert producer_config(written).max_input_tokens == 32768  # the daemons take the written file as is
