"""The dashboard, fed from real topics: its summary and server-sent events follow records as they land,
a replayed range shows only that range, and a real headless Chromium renders the page (charts' tables,
verdicts and drops by reason, an episode's screenshots from the blob store and its decoded actions).
The rendered page is saved as a test artifact (``test-artifacts/dashboard.png``)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn
from PIL import Image
from transformers import AutoTokenizer

from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import build_app
from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.evaluation.plan import eval_seeds
from cua_stream.evaluation.stats import wilson
from cua_stream.events import (
    CallKind,
    DeadLetter,
    Discard,
    EvalReport,
    EvalTask,
    GroupDropped,
    ImageRef,
    Logprobs,
    OutcomeEvent,
    PolicyVersion,
    Reward,
    ScoreEvent,
    TaskRef,
    TokenIds,
    TrainStep,
    TurnEvent,
    WorkRequest,
)  # fmt: skip
from cua_stream.learn_table import blind_report
from cua_stream.topics import DLQ, EVALS, OUTCOMES, POLICY, SCORES, TRAIN_STEPS, TURNS, WORK
from tests.conftest import free_port, wait_until
from tests.integration.browser import Page, chromium
from tests.integration.gateway_servers import serving, tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]

RUN, GROUP = "dash", "dash-g000000"
LEARN = "learn-dash"
ACTIONS = ["left_click x=412 y=230", "type_text Ada Lovelace"]
ARTIFACTS = Path(os.environ.get("CUA_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))


def png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (160, 100), color).save(buf, format="PNG")
    return buf.getvalue()


def first_records(tokenizer: object, blobs: LocalBlobStore) -> list[tuple[object, object]]:
    ids = {"run_id": RUN, "group_id": GROUP}
    out: list[tuple[object, object]] = []
    for e in range(2):
        out.append((WORK, WorkRequest(**ids, episode_id=f"{GROUP}-e{e}", task=TaskRef(name="click-button"),
                                      sample_index=e, group_size=2, policy_version=0, created_at=1.0)))  # fmt: skip
    for seq, (action, color) in enumerate(zip(ACTIONS, [(200, 40, 40), (40, 160, 60)], strict=True)):
        data = png(color)
        image = ImageRef(sha256=blobs.put(data), size=len(data), width=160, height=100)
        out.append((TURNS, TurnEvent(
            **ids, episode_id=f"{GROUP}-e0", seq=seq, call_id=f"c{seq}", parent_call_id=f"c{seq - 1}" if seq else None,
            kind=CallKind.AGENT_TURN, prompt_ids=TokenIds([1, 2, 3]),
            completion_ids=TokenIds(tokenizer.encode(action, add_special_tokens=False)),  # type: ignore[attr-defined]
            completion_logprobs=Logprobs([-0.5] * len(tokenizer.encode(action, add_special_tokens=False))),  # type: ignore[attr-defined]
            images=(image,), policy_version=0, finish_reason="stop", started_at=2.0, engine_ms=120.0, gateway_ms=135.0,
        )))  # fmt: skip
    out.append((OUTCOMES, OutcomeEvent(**ids, episode_id=f"{GROUP}-e0", task="click-button", policy_version=0,
                                       agent_started=True, rewards={"reward": 1.0}, n_turns=2, started_at=2.0,
                                       finished_at=9.0)))  # fmt: skip
    out.append((SCORES, ScoreEvent(**ids, episode_id=f"{GROUP}-e0", verdict=Reward(value=1.0), policy_version=0,
                                   scored_at=9.5)))  # fmt: skip
    out.append((SCORES, ScoreEvent(**ids, episode_id=f"{GROUP}-e1", verdict=Discard(reason="sandbox_lost"),
                                   policy_version=0, scored_at=9.6)))  # fmt: skip
    out.append((TRAIN_STEPS, GroupDropped(run_id=RUN, group_id=GROUP, reason="discarded", trainer_version=0,
                                          dropped_at=10.0)))  # fmt: skip
    out.append((DLQ, DeadLetter(run_id="", reason="undecodable", error="x", source_topic="o", partition=0,
                                offset=3, at=10.0)))  # fmt: skip
    # a learn run's blind baseline and base evaluation (its table: SFT and GRPO did not report)
    out.append((EVALS, blind_report(["click-button"], eval_seeds(0, 20), f"eval-{LEARN}-blind", 10.0)))
    won = wilson(1, 2)
    base = EvalTask(task="click-button", episodes=2, scored=2, successes=1, low=won.low, high=won.high)
    out.append((EVALS, EvalReport(run_id=f"eval-{LEARN}-base", policy="base", environment="local", samples=1,
                                  success_at=1.0, layouts=2, tasks=(base,), created_at=11.0)))  # fmt: skip
    return out


def step(n: int, reward: float) -> list[tuple[object, object]]:
    return [
        (TRAIN_STEPS, TrainStep(run_id=RUN, step=n, policy_version=n, n_groups=1, n_episodes=2, n_samples=2,
                                loss=0.1, group_ids=(GROUP,), finished_at=20.0 + n,
                                metrics={"mean_reward": reward, "logprob_gap": 1e-6 * n, "grad_norm": 0.25 * n})),
        (POLICY, PolicyVersion(run_id=RUN, version=n, weights_path=f"w{n}", step=n, published_at=20.0 + n)),
    ]  # fmt: skip


async def publish(bus: BusConfig, records: list[tuple[object, object]]) -> None:
    async with EventProducer(bus) as producer:
        for spec, event in records:
            await producer.publish(spec, event)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_dashboard_follows_the_topics_live_replays_a_range_and_renders_in_chromium(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    blobs = LocalBlobStore(tmp_path / "blobs")
    first = first_records(tokenizer, blobs) + step(1, 0.5)
    await publish(bus_config, first)
    cut_ms = int(time.time() * 1000) + 1
    await anyio.sleep(0.05)
    cfg = DashboardConfig(port=free_port(), blob_dir=str(tmp_path / "blobs"), model_path=str(tiny_model_dir),
                          bus=bus_config)  # fmt: skip
    url = f"http://127.0.0.1:{cfg.port}"
    server = uvicorn.Server(uvicorn.Config(build_app(cfg), host=cfg.host, port=cfg.port, log_level="warning"))
    with serving(server):
        async with httpx.AsyncClient(timeout=30) as http:
            # live: the stream's first event holds what was there; the next one what lands after
            async with http.stream("GET", f"{url}/api/stream") as stream:
                lines = stream.aiter_lines()
                seen = json.loads((await _next_data(lines))[6:])
                while seen["records"] < len(first):
                    seen = json.loads((await _next_data(lines))[6:])
                assert [s["step"] for s in seen["steps"]] == [1] and seen["source"]["mode"] == "live"
                await publish(bus_config, step(2, 1.0))
                while len(seen["steps"]) < 2:
                    seen = json.loads((await _next_data(lines))[6:])
            assert [(s["step"], s["mean_reward"]) for s in seen["steps"]] == [(1, 0.5), (2, 1.0)]
            assert [s["by_task"] for s in seen["steps"]] == [
                {"click-button": 1.0}
            ] * 2  # its rewarded episode
            assert seen["verdicts"] == {"reward 1 (ok)": 1, "discard (sandbox_lost)": 1}
            assert seen["drops"] == {"discarded": 1} and seen["dead_letters"] == {"undecodable": 1}
            assert seen["staleness"] == {"0": 1, "1": 1} and seen["latest_version"] == 2
            assert seen["latency_ms"]["engine_p50"] == 120.0 and seen["latency_ms"]["calls"] == 2
            assert seen["tasks"] == {"click-button": {"scored": 2, "mean_reward": 1.0, "discarded": 1}}
            detail = (await http.get(f"{url}/api/episodes/{GROUP}-e0")).json()
            assert [c["action"] for c in detail["calls"]] == ACTIONS  # decoded with the real tokenizer
            sha = detail["calls"][0]["images"][0]
            image = await http.get(f"{url}/blobs/{sha}")
            assert image.headers["content-type"] == "image/png" and image.content == blobs.get(sha)
            assert (await http.get(f"{url}/blobs/{'0' * 64}")).status_code == 404
            assert (await http.get(f"{url}/blobs/not-a-hash")).status_code == 400
            assert (await http.get(f"{url}/api/episodes/nope")).status_code == 404
            lib = await http.get(f"{url}/vendor/uPlot.iife.min.js")  # the vendored charting library
            assert lib.headers["content-type"] == "text/javascript; charset=utf-8" and b"uPlot" in lib.content
        # a real browser, while records land: the page as a user sees it, on one episode's view
        async with chromium(f"{url}/#episode={GROUP}-e0") as page:
            dom = await page.until(lambda h: "policy v2" in h and all(a in h for a in ACTIONS))
            assert "<td>2</td><td>v2</td><td>2</td><td>1.000</td>" in dom  # the steps table, newest first
            links = dom.replace(
                "&amp;", "&"
            )  # each step's row links to its `inspect step`; the episode to its step
            assert (
                '<a href="/api/inspect/step?run=dash&step=2&format=text" class="inspect">inspect</a>' in links
            )
            assert f"trained in step 1 of {RUN}" in dom
            assert '<td class="by-task">click-button 1.00</td>' in dom  # each step's reward by task
            assert "discard (sandbox_lost)" in dom and "reward 1 (ok)" in dom and "discarded" in dom
            assert f'src="/blobs/{sha}"' in dom and 'class="uplot' in dom  # a screenshot; the charts
            assert "<td>click-button</td><td>2</td><td>1.000</td><td>1</td>" in dom  # reward by task
            blind = blind_report(["click-button"], eval_seeds(0, 20), "", 0.0).tasks[0]  # the learning panel
            hits = f"{blind.successes / 20:.2f} [{blind.low:.2f}, {blind.high:.2f}] ({blind.successes}/20)"
            assert (
                f"<td>{LEARN}</td><td>click-button</td><td>{hits}</td><td>0.50 [0.09, 0.91] (1/2)</td>" in dom
            )
            assert "<td>—</td><td>—</td></tr>" in dom  # no SFT, no GRPO
            await publish(bus_config, step(3, 0.75))
            dom = await page.until(lambda h: "policy v3" in h)
            assert "<td>3</td><td>v3</td><td>2</td><td>0.750</td>" in dom
            await check_charts(page)
            overflow = await page.evaluate(LAYOUT)
            assert overflow == {"viewport": 1280, "scroll_width": 1280, "past_an_edge": []}
            await anyio.Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
            await page.screenshot(ARTIFACTS / "dashboard.png")
        with Image.open(ARTIFACTS / "dashboard.png") as shot:
            assert shot.width == 1280 and shot.height > 1000  # the viewport (less the browser's own frame)
    # a replayed range: up to the moment before step 2 was published
    replay = DashboardConfig(
        port=free_port(), end=f"@{cut_ms}", blob_dir=str(tmp_path / "blobs"), bus=bus_config
    )
    server = uvicorn.Server(
        uvicorn.Config(build_app(replay), host="127.0.0.1", port=replay.port, log_level="warning")
    )
    with serving(server):
        summary: dict = {}

        async def complete() -> bool:
            nonlocal summary
            async with httpx.AsyncClient(timeout=30) as http:
                summary = (await http.get(f"http://127.0.0.1:{replay.port}/api/summary")).json()
            return summary["source"]["complete"]

        with anyio.fail_after(60):
            await wait_until(complete, poll_s=0.2)
    assert [s["step"] for s in summary["steps"]] == [1] and summary["records"] == len(first)
    assert summary["source"]["mode"].startswith("replay")


CHARTS = """Object.fromEntries(Object.entries(window.cuaCharts).map(([id, u]) => [id, {
  time: u.scales.x.time, axes: u.axes.map((a) => a.label), series: u.series.slice(1).map((s) => s.label),
  x: u.data[0], ys: u.data.slice(1)}]))"""
"""What each uPlot chart on the page holds: its x scale (time or not), its axes' labels, series, data."""
LEGEND = "[...document.querySelectorAll('#reward-chart .u-legend .u-value')].map((e) => e.textContent)"
LAYOUT = """(() => {
  const viewport = document.documentElement.clientWidth, past = [];
  for (const el of document.querySelectorAll(".card, table, th, td, .uplot, canvas, .u-legend, img, pre")) {
    const r = el.getBoundingClientRect(), card = el.parentElement.closest(".card");
    const right = card ? card.getBoundingClientRect().right : viewport;
    if (r.width && (r.left < 0 || r.right > right + 0.5)) past.push(`${el.tagName} ${el.textContent.slice(0, 30)}`);
  }
  return {viewport, scroll_width: document.documentElement.scrollWidth, past_an_edge: past};
})()"""
"""The page's own layout at the browser's width: nothing wider than the page, no card past the viewport's
right edge, and no table, cell, chart or legend past its card's (the steps table's last column was)."""


async def check_charts(page: Page) -> None:
    """The charts as drawn by uPlot: axes labelled with units, x in steps (or time, switched), one series
    per task, and the values under the pointer in the legend."""
    charts = await page.evaluate(CHARTS)
    reward, task, gap = charts["reward-chart"], charts["task-chart"], charts["gap-chart"]
    assert reward == {"time": False, "axes": ["step", "reward"], "series": ["mean reward"],
                      "x": [1, 2, 3], "ys": [[0.5, 1.0, 0.75]]}  # fmt: skip
    assert task["series"] == ["click-button"] and task["ys"] == [[1.0, 1.0, 1.0]]
    assert gap["axes"] == ["step", "nats/token"]
    assert gap["ys"][0] == pytest.approx([1e-6, 2e-6, 3e-6])
    assert charts["grad-chart"]["axes"][1] == "L2 norm"
    throughput = charts["throughput-chart"]
    assert throughput["time"] and throughput["axes"] == ["time (UTC)", "episodes/min"]
    assert throughput["x"] == [0] and throughput["ys"] == [[1]]  # one episode finished at t = 9 s
    assert await page.evaluate(LEGEND) == ["newest: step 3 · v3 · 00:00:23 UTC", "0.75"]  # not hovered
    # the pointer over step 2: the legend shows that step's values
    x, y = await page.evaluate(
        "(() => { const u = cuaCharts['reward-chart'], r = u.over.getBoundingClientRect();"
        " return [r.left + u.valToPos(2, 'x'), r.top + r.height / 2]; })()"
    )
    await page.hover(x, y)

    async def legend_shows_step_2() -> bool:
        return await page.evaluate(LEGEND) == ["step 2 · v2 · 00:00:22 UTC", "1"]

    with anyio.fail_after(30):  # a hang guard: Chromium on a loaded machine may be slow to repaint
        await wait_until(legend_shows_step_2, poll_s=0.1)
    await page.hover(0, 0)
    switch = (
        "(() => { const s = document.getElementById('x-axis'); s.value = '{}';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    await page.evaluate(switch.replace("{}", "time"))
    by_time = (await page.evaluate(CHARTS))["reward-chart"]
    assert by_time["time"] and by_time["axes"][0] == "time (UTC)" and by_time["x"] == [21, 22, 23]
    await page.evaluate(switch.replace("{}", "step"))  # the screenshot in steps


async def _next_data(lines: object) -> str:
    with anyio.fail_after(30):
        async for line in lines:  # type: ignore[attr-defined]
            if line.startswith("data: "):
                return line
    raise AssertionError("the stream ended")


def test_a_dashboard_with_nothing_to_show_says_why_in_one_line(kafka_bootstrap: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable,
            "-m",
            "cua_stream",
            "dashboard",
            "-b",
            kafka_bootstrap,
            "--port",
            str(free_port()),
        ]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)

    missing = run("--prefix", "no-such-run")
    assert missing.returncode == 2 and "no topics under 'no-such-run.'" in missing.stderr
    bad = run("--from", "yesterday")
    assert bad.returncode == 2 and "dashboard.start" in bad.stderr and "Traceback" not in bad.stderr
