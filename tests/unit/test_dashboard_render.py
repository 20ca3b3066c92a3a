"""The dashboard page's script (``app.js``) rendering a board summary, run under Node with a minimal
stand-in for the DOM (elements that keep their children and text): what each table's rows say, and that
a summary of any size renders (a spread of 200,000 rows had thrown "Maximum call stack size exceeded"
and left the eval, learn and episode panels empty)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from consumers.dashboard.board import Board
from cua_stream.bus.codec import json_line
from cua_stream.evaluation.report import report_of
from cua_stream.evaluation.results import EvalEpisode, EvalResults
from cua_stream.events import DeadLetter, EvalReport, EvalTask
from cua_stream.learn_table import blind_report

APP = Path(__file__).resolve().parents[2] / "consumers" / "dashboard" / "app.js"

HARNESS = r"""
const fs = require("fs"), vm = require("vm");
class Node { constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.dataset = {};
  this.style = {}; this.className = ""; this.own = ""; this.value = "step";
  this.tBodies = tag === "table" ? [new Node("tbody")] : []; }
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
const sizes = Object.fromEntries(["verdicts", "evals", "learn", "episodes"].map((id) =>
  [id, (ids[id].tBodies[0] || ids[id]).children.length + ids[id].children.length]));
const notices = Object.values(ids).flatMap((n) => [n, ...n.tBodies]).flatMap((n) => n.children)
  .filter((tr) => tr.className.includes("notice")).map((tr) => tr.textContent);
console.log(JSON.stringify({ learn: rows("learn").slice(0, 100), retrains: rows("retrains").slice(0, 100), source: ids.source.textContent, sizes, notices }));
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


def huge_report(run_id: str, policy: str, tasks: int, at: float) -> EvalReport:
    """An evaluation of ``tasks`` tasks (10,000 of them: 1.47 MB, a record Kafka accepts)."""
    rows = [EvalTask(task=f"task-{i:05d}", episodes=8, scored=8, successes=i % 9, low=0.1, high=0.9,
                     pass_at={1: 0.5, 8: 0.9}) for i in range(tasks)]  # fmt: skip
    overall = EvalTask(
        task="overall", episodes=8 * tasks, scored=8 * tasks, successes=tasks, low=0.1, high=0.2
    )
    return EvalReport(run_id=run_id, policy=policy, environment="local", samples=8, success_at=1.0, layouts=8,
                      tasks=(*rows, overall), created_at=at)  # fmt: skip


def test_twenty_evaluations_of_10000_tasks_are_shown_in_part_with_a_notice_on_every_panel() -> None:
    board = Board()
    for i in range(20):
        board.add(huge_report(f"eval-{i}", f"/models/m{i}", 10_000, at=float(i)))
    board.add(huge_report("eval-learn-1-base", "base", 10_000, at=30.0))  # a learn run's column
    for i in range(5000):  # dead letters of as many reasons
        board.add(DeadLetter(run_id="r", reason=f"reason {i}", source_topic="t", partition=0, offset=i, error="e",
                             at=0.0))  # fmt: skip
    summary = board.summary()
    assert len(json_line(summary)) < 400_000  # before: 17.9 MB, rebuilt per stream per push
    shown = rendered(summary)
    assert shown["sizes"]["evals"] == 20 * (40 + 1 + 1)  # 40 tasks, overall and the notice, per report
    assert summary["dead_letters"]["(other reasons)"] == 4000  # 1,000 reasons counted apart, the rest as one
    assert "and 971 more (971 records)" in shown["notices"]  # of which the 30 most common are shown
    assert "/models/m19: showing 40 of 10000 tasks" in shown["notices"]
    assert "base: showing 40 of 10000 tasks" in shown["notices"]  # the eval panel's
    learn = shown["learn"]
    assert len(learn) == 42 and learn[0]["cells"][:2] == ["learn-1", "task-00000"]  # type: ignore[index]
    assert [r["cells"] for r in learn[-2:]] == [  # type: ignore[index]
        ["", "overall", "—", "0.12 [0.10, 0.20] (10000/80000)", "—", "—"],
        ["learn-1: showing 40 of 10000 tasks"],
    ]


def test_the_page_renders_a_summary_of_any_size() -> None:
    # not through the board: whatever a summary holds, the page draws it (150,000 items is past V8's limit
    # on a call's arguments, so a spread of any of these lists into a call throws)
    n = 150_000
    summary = Board().summary()
    rows = [
        {"task": f"t{i}", "rate": 0.5, "scored": 2, "low": 0.1, "high": 0.9, "pass_at": {}} for i in range(n)
    ]
    summary["evals"] = [{"run_id": "eval-x", "policy": "p", "lag_s": None, "tasks_total": n, "tasks": rows}]
    summary["verdicts"] = {f"reward 1 (reason {i})": 1 for i in range(n)}
    summary["episodes"] = [{"episode_id": f"e{i}", "task": "t", "calls": 1, "verdict": ""} for i in range(n)]
    shown = rendered(summary)
    assert shown["sizes"] == {"verdicts": n, "evals": n, "learn": 1, "episodes": n}


def test_the_retrains_panel_puts_each_retrained_step_beside_the_same_step_of_its_run() -> None:
    from cua_stream.events import TrainStep

    def step(run: str, n: int, loss: float, of: str = "") -> TrainStep:
        return TrainStep(run_id=run, step=n, policy_version=n, n_groups=1, n_episodes=4, n_samples=4, loss=loss,
                         metrics={"kl": 0.01 * n, "clip_fraction": 0.5, "grad_norm": 2.0, "logprob_gap": 0.001},
                         finished_at=1.0, retrain_of=of)  # fmt: skip

    board = Board()
    assert rendered(board.summary())["retrains"] == [
        {"class": "", "cells": ["no retrain yet"], "colspan": ["7"]}
    ]
    for event in (
        step("r1", 1, 0.25),
        step("r1", 2, 0.5),
        step("r2", 1, 0.125, "r1"),
        step("r2", 3, 1.0, "r1"),
    ):
        board.add(event)
    assert rendered(board.summary())["retrains"] == [
        {"class": "", "cells": ["r2 (of r1)", "1", "0.1250", "0.0100", "0.500", "2.000", "1.00e-3"], "colspan": [None] * 7},
        {"class": "muted", "cells": ["", "r1", "0.2500", "0.0100", "0.500", "2.000", "1.00e-3"], "colspan": [None] * 7},
        {"class": "", "cells": ["", "3", "1.0000", "0.0300", "0.500", "2.000", "1.00e-3"], "colspan": [None] * 7},
    ]  # fmt: skip  # r1's step 3 is not on the board: no row under it
