"""Demonstrations end to end: `cua-stream record-oracle` records the oracle on real computer-1 trials
(local desktop) through the gateway and engine as forced completions, the scorer's verifiers reward
them; `cua-stream sft` trains the tiny policy on them and saves a model an engine serves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cua_stream.procs import child
from cua_stream.tasks.pages import BOX_H, BOX_W, layout
from cua_stream.tasks.policies import find_color
from tests.conftest import broker_port, free_port

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.desktop,
    pytest.mark.timeout(900),
]


def cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cua_stream", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_oracle_demonstrations_are_recorded_through_the_gateway_and_train_the_policy(tmp_path: Path) -> None:
    port = broker_port()
    env = os.environ | {"CUA_HOME": str(tmp_path / "home"), "CUA_BROKER_PORT": str(port)}
    try:
        rec = cli(
            "record-oracle", "--tasks", "click-button,fill-form", "--seeds", "1", "--run-id", "demos",
            "--engine-port", str(free_port()), "--gateway-port", str(free_port()),
            "--policies-port", str(free_port()), env=env,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stdout[-3000:] + rec.stderr[-3000:]
        rows = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(r"│ (\S+)\s+│ (\d+)\s+│ (\d+)", rec.stdout)}
        assert rows == {"click-button": (1, 1), "fill-form": (1, 1)}, rec.stdout

        # the turns on the topic are the oracle's replies, token for token, with the policy's logprobs
        replayed = tmp_path / "turns.jsonl"
        replay = cli("replay", "--topic", "turns", "-b", f"127.0.0.1:{port}", "-o", str(replayed), env=env)
        assert replay.returncode == 0, replay.stderr
        turns = [json.loads(line)["event"] for line in replayed.read_text().splitlines()[1:]]
        assert len(turns) >= 2 * 4  # click: click + done x2 (+ waits); fill: click, type, click, done x2
        from transformers import AutoTokenizer

        from cua_stream.app.demo import tiny_model_dir

        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
        for turn in turns:
            reply = tokenizer.decode(turn["completion_ids"][:-1])
            assert json.loads(reply)["analysis"] == "scripted policy", reply
            assert turn["completion_ids"][-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
            assert all(lp < 0 for lp in turn["completion_logprobs"])

        out = tmp_path / "sft"
        sft = cli(
            "sft", "--run-id", "demos", "--model-path", str(tiny_model_dir()), "--out", str(out),
            "--epochs", "3", "--lr", "1e-3", "--bootstrap", f"127.0.0.1:{port}", env=env,
        )  # fmt: skip
        assert sft.returncode == 0, sft.stdout[-3000:] + sft.stderr[-3000:]
        assert "demonstrations: 2 episode(s), 2 sample(s); left out: none" in sft.stdout
        before, after = map(float, re.search(r"token: ([\d.]+) -> ([\d.]+)", sft.stdout).groups())  # type: ignore[union-attr]
        assert after < before - 1.0, sft.stdout
        # a measured end: the same seeded training stops at the first epoch whose NLL is at the target
        target = (before + after) / 2
        early = cli(
            "sft", "--run-id", "demos", "--model-path", str(tiny_model_dir()), "--out", str(tmp_path / "early"),
            "--epochs", "10", "--target-nll", f"{target:.3f}", "--lr", "1e-3", "--bootstrap", f"127.0.0.1:{port}",
            env=env,
        )  # fmt: skip
        assert early.returncode == 0, early.stdout[-3000:] + early.stderr[-3000:]
        stopped = int(re.search(r"stopped at epoch (\d+): the NLL reached the target", early.stdout).group(1))  # type: ignore[union-attr]
        assert 1 <= stopped <= 3 and f"epoch {stopped + 1}/10" not in early.stdout, early.stdout
        final = float(re.search(r"token: [\d.]+ -> ([\d.]+)", early.stdout).group(1))  # type: ignore[union-attr]
        assert final <= target, early.stdout

        engine = f"http://127.0.0.1:{free_port()}"
        with child(
            ["engine", str(out), "--port", engine.rsplit(":", 1)[1]], f"{engine}/health", tmp_path / "e.log"
        ):
            pass  # the fine-tuned model is a whole model directory: an engine starts from it
        none = cli(
            "sft",
            "--run-id",
            "nothing-here",
            "--model-path",
            str(out),
            "--bootstrap",
            f"127.0.0.1:{port}",
            env=env,
        )
        assert none.returncode == 2 and "no demonstration of runs nothing-here" in none.stdout

        # click-box's first screens drawn on new layouts (issue O): the recorded first call replayed on
        # screens redrawn from the desktop's own, each in the blob store with the click moved onto its target
        boxes = cli(
            "record-oracle", "--tasks", "click-box", "--seeds", "3", "--run-id", "boxes",
            "--engine-port", str(free_port()), "--gateway-port", str(free_port()),
            "--policies-port", str(free_port()), env=env,
        )  # fmt: skip
        assert boxes.returncode == 0, boxes.stdout[-3000:] + boxes.stderr[-3000:]
        blobs = tmp_path / "home" / "blobs"
        recorded = {p for p in blobs.rglob("*") if p.is_file()}
        drawn = cli(
            "sft", "--run-id", "boxes", "--model-path", str(tiny_model_dir()), "--out", str(tmp_path / "drawn"),
            "--epochs", "1", "--drawn", "4", "--bootstrap", f"127.0.0.1:{port}", env=env,
        )  # fmt: skip
        assert drawn.returncode == 0, drawn.stdout[-3000:] + drawn.stderr[-3000:]
        assert re.search(
            r"demonstrations: 3 episode\(s\), 7 sample\(s\) \(4 of them drawn\)", drawn.stdout
        ), drawn.stdout
        screens = {p for p in blobs.rglob("*") if p.is_file()} - recorded
        layouts = [layout("click-box", 2**39 + i) for i in range(4)]
        assert len(screens) == 4
        kinds = set()
        for path in recorded:
            with Image.open(path) as image:
                kinds.add((image.format, image.size))
        for path in screens:
            with Image.open(path) as image:
                assert (image.format, image.size) in kinds  # the recorded screens' own format and size
                pixels = np.asarray(image.convert("RGB"))
            colors = [lay.element("target").color for lay in layouts]
            assert any(find_color(pixels, c, aspect=BOX_W / BOX_H) for c in colors), path
    finally:
        cli("broker", "stop", env=env)
