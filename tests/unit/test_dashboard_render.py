"""The dashboard page's script (``app.js``) rendering a board summary, run under Node with a minimal
stand-in for the DOM (elements that keep their children and text): what each table's rows say."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from consumers.dashboard.board import Board
from cua_stream.evaluation.report import report_of
from cua_stream.evaluation.results import EvalEpisode, EvalResults
from cua_stream.learn_table import blind_report

APP = Path(__file__).resolve().parents[2] / "consumers" / "dashboard" / "app.js"

HARNESS = r"""
const fs = require("fs"), vm = require("vm");
class Node { constructor(tag) { Object.assign(this, { tag, children: [], attrs: {}, dataset: {}, style: {},
  className: "", own: "", value: "step", tBodies: tag === "table" ? [new Node("tbody")] : [] }); }
  setAttribute(k, v) { this.attrs[k] = v; } append(...c) { this.children.push(...c); }
  replaceChildren(...c) { this.children = c; this.own = ""; } addEventListener() {}
  get textContent() { return this.own + this.children.map((c) => c.textContent).join(""); }
  set textContent(v) { this.own = String(v); this.children = []; } }
class Text extends Node { constructor(t) { super("#text"); this.own = t; } }
const ids = {};
const document = { getElementById: (id) => (ids[id] ??= new Node("table")),
  createElement: (tag) => new Node(tag), createTextNode: (t) => new Text(t) };
const ctx = vm.createContext({ document, Node, location: { hash: "" }, window: { addEventListener() {} },
  EventSource: class { constructor() {} }, console });
vm.runInContext(fs.readFileSync(process.argv[1], "utf8"), ctx);
ctx.summary = JSON.parse(fs.readFileSync(0, "utf8"));
vm.runInContext("render(summary)", ctx);
const rows = (id) => ids[id].tBodies[0].children.map((tr) => ({ class: tr.className,
  cells: tr.children.map((td) => td.textContent), colspan: tr.children.map((td) => td.attrs.colspan ?? null) }));
console.log(JSON.stringify({ learn: rows("learn"), source: ids.source.textContent }));
"""


def rendered(summary: dict[str, object]) -> dict[str, object]:
    node = shutil.which("node")
    assert node is not None, "Node.js runs the page's script: scripts/setup.sh installs it (apt-get nodejs)"
    res = subprocess.run([node, "-e", HARNESS, str(APP)], input=json.dumps(summary), capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def stage(name: str, rewards: list[float]) -> EvalResults:
    episodes = [EvalEpisode(episode_id=f"{name}-{i}", task="click-test", seed=i, sample=0, verdict="reward",
                            reward=r) for i, r in enumerate(rewards)]  # fmt: skip
    return EvalResults(run_id=f"eval-learn-1-{name}", policy=name, environment="local", samples=1,
                       seeds=list(range(len(rewards))), tasks=["click-test"], created_at=1.0, episodes=episodes)  # fmt: skip


def test_the_learning_panel_renders_a_row_per_task_with_every_stage() -> None:
    board = Board()
    board.add(blind_report(["click-test"], [1, 2, 3, 4, 5], "eval-learn-1-blind", 0.5))
    board.add(report_of(stage("base", [0.0, 0.0, 0.0, 0.0])))
    board.add(report_of(stage("grpo", [1.0, 1.0, 0.0, 1.0])))
    shown = rendered(board.summary())
    assert shown["learn"] == [
        {"class": "", "cells": ["learn-1", "click-test", "1.00 [0.57, 1.00] (5/5)", "0.00 [0.00, 0.49] (0/4)",
                                "—", "0.75 [0.30, 0.95] (3/4)"], "colspan": [None] * 6},
        {"class": "overall", "cells": ["", "overall", "1.00 [0.57, 1.00] (5/5)", "0.00 [0.00, 0.49] (0/4)",
                                       "—", "0.75 [0.30, 0.95] (3/4)"], "colspan": [None] * 6},
    ]  # fmt: skip
    assert "could not be drawn" in str(shown["source"])  # no charting library here: the tables still render


def test_with_no_learn_run_the_panel_says_so() -> None:
    shown = rendered(Board().summary())
    assert shown["learn"] == [{"class": "", "cells": ["no learn run yet"], "colspan": ["6"]}]
