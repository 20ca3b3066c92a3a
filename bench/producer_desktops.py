"""The real path on this machine: episodes per minute with 1, 2 and 4 concurrent episodes, on the local
desktop and in Docker side by side, on the bundled tasks and on MiniWoB++ tasks side by side, and where
an episode's time goes.

    .venv/bin/python bench/producer_desktops.py [--desktops 1 2 4] [--episodes-per-desktop 2] [--turns 3]
        [--environments local-desktop docker] [--suites bundled miniwob] [--bootstrap host:port]

Everything real: the producer daemon's loop, Harbor trials of computer-1 (Qwen3VLComputer1) on the local
desktop (namespaces, Xvfb, xfce4, Chromium, a bundled task's page) or in Harbor's docker environment
(cua-stream's private daemon, the bundled tasks' images), the session gateway and the CPU reference
engine serving the tiny random Qwen3-VL, the Kafka broker. Needs root. At each concurrency the
environments run one after the other in the same run; phases come from each trial's own
``result.json``; model time is the engine's and the gateway's milliseconds on the episode's turn events.
Ratios: against one episode at a time in the same environment and suite, Docker against the local
desktop, and MiniWoB++ against the bundled tasks. The MiniWoB++ suite is eight of its click and type tasks
(``MINIWOB``), served by the episode's own page server from the exported suite as in training.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from bench.fixtures.broker import bootstrap_or_private
from consumers.trainer.stream.feeder import work_for_group
from cua_stream.app.demo import TEMPERATURE, tiny_model_dir
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import CallRecord
from cua_stream.procs import child
from cua_stream.tasks import TASKS
from cua_stream.topics import SUMMARIES, TURNS, WORK
from producers.config import ProducerConfig
from producers.daemon import Producer

PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")
MINIWOB = [
    f"miniwob/{t}"
    for t in ("click-button", "click-link", "click-dialog", "click-tab", "click-test-2", "focus-text",
              "enter-text", "click-color")
]  # fmt: skip
SUITES = {"bundled": list(TASKS), "miniwob": MINIWOB}


def seconds(timing: dict | None) -> float:
    if not timing or not timing.get("started_at") or not timing.get("finished_at"):
        return 0.0
    start, end = (
        datetime.fromisoformat(timing[k].replace("Z", "+00:00")) for k in ("started_at", "finished_at")
    )
    return (end - start).total_seconds()


async def one_level(
    bus: BusConfig,
    gateway_url: str,
    suite: str,
    environment: str,
    desktops: int,
    per: int,
    turns: int,
    trials: Path,
) -> dict:
    run_id = f"bench{desktops}-{uuid.uuid4().hex[:6]}"
    sampling = {"temperature": TEMPERATURE, "max_new_tokens": 8}
    work = [  # one-episode groups of the suite's tasks in turn, as the trainer's feeder issues them
        w
        for g in range(desktops * per)
        for w in work_for_group(
            run_id, g, tasks=SUITES[suite], group_size=1, policy_version=0, sampling=sampling, now=0
        )
    ]
    config = ProducerConfig(
        gateway_url=gateway_url,
        environment=environment,
        concurrency=desktops,
        max_turns=turns,
        trials_dir=str(trials / run_id),
        bus=bus,
    )
    producer = Producer(config)
    async with anyio.create_task_group() as tg:
        stop = anyio.Event()
        await tg.start(lambda task_status: producer.run(stop=stop, task_status=task_status))
        t0 = time.monotonic()
        async with EventProducer(bus) as out:
            for w in work:
                await out.publish(WORK, w)
        while producer.published < len(work):  # noqa: ASYNC110 - a counter, polled
            await anyio.sleep(0.2)
        wall = time.monotonic() - t0
        stop.set()
    phases = {p: 0.0 for p in PHASES}
    results = list((trials / run_id).glob("*/result.json"))
    for path in results:
        result = json.loads(path.read_text())
        for p in PHASES:
            phases[p] += seconds(result.get(p))
    model_ms = gateway_ms = calls = 0.0
    for spec in (TURNS, SUMMARIES):
        async for d in scan(bus, spec):
            if isinstance(d.event, CallRecord) and d.event.run_id == run_id:
                model_ms += d.event.engine_ms
                gateway_ms += d.event.gateway_ms
                calls += 1
    n = len(work)
    return {
        "suite": suite,
        "environment": environment,
        "desktops": desktops,
        "episodes": n,
        "wall_s": wall,
        "per_min": n / wall * 60,
        **{p: phases[p] / max(len(results), 1) for p in PHASES},
        "model_s": model_ms / 1e3 / n,
        "gateway_s": gateway_ms / 1e3 / n,
        "calls": calls / n,
    }


async def main(
    bootstrap: str, levels: list[int], per: int, turns: int, environments: list[str], suites: list[str]
) -> None:
    if "docker" in environments:
        from cua_stream.containers import ensure_running

        ensure_running(say=print)
    bus = BusConfig(bootstrap_servers=bootstrap, topic_prefix=f"benchdesk-{uuid.uuid4().hex[:6]}")
    async with TopicAdmin(bus) as admin:
        await admin.create()
    model = tiny_model_dir()
    with tempfile.TemporaryDirectory() as tmp:
        engine_url, gateway_url = "http://127.0.0.1:39411", "http://127.0.0.1:39412"
        gw = ["gateway", "--model-path", str(model), "--engine-url", engine_url, "--port", "39412"]
        gw += ["--bootstrap", bootstrap, "--prefix", bus.topic_prefix]
        with (
            child(
                ["engine", str(model), "--port", "39411"], f"{engine_url}/health", Path(tmp) / "engine.log"
            ),
            child(gw, f"{gateway_url}/health", Path(tmp) / "gateway.log"),
        ):
            rows = [
                await one_level(bus, gateway_url, suite, env, d, per, turns, Path(tmp) / "trials")
                for d in levels
                for env in environments  # side by side at each level
                for suite in suites
            ]
    print(f"turns/episode <= {turns}; per episode, mean seconds (phases from Harbor's result.json)")
    head = f"{'suite':>8} {'environment':>13} {'at once':>7} {'episodes':>8} {'wall s':>7} {'ep/min':>7} "
    head += f"{'vs 1':>5} {'vs local':>8} {'vs bundled':>10} {'env start':>9} {'agent setup':>11} "
    print(head + f"{'agent run':>9} {'(model)':>8} {'(gateway)':>9} {'verifier':>8} {'calls':>5}")
    rate = {(r["suite"], r["environment"], r["desktops"]): r["per_min"] for r in rows}

    def versus(key: tuple[str, str, int], r: dict, width: int) -> str:
        return f"{r['per_min'] / rate[key]:>{width - 1}.2f}x" if key in rate else f"{'':>{width}}"

    for r in rows:
        s, e, d = r["suite"], r["environment"], r["desktops"]
        print(
            f"{s:>8} {e:>13} {d:>7} {r['episodes']:>8} {r['wall_s']:>7.1f} {r['per_min']:>7.1f} "
            f"{versus((s, e, levels[0]), r, 5)} {versus((s, 'local-desktop', d), r, 8)} "
            f"{versus(('bundled', e, d), r, 10)} "
            f"{r['environment_setup']:>9.2f} {r['agent_setup']:>11.2f} {r['agent_execution']:>9.2f} "
            f"{r['model_s']:>8.2f} {r['gateway_s']:>9.3f} {r['verifier']:>8.2f} {r['calls']:>5.1f}",
            flush=True,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--desktops", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--episodes-per-desktop", type=int, default=2)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--environments", nargs="+", default=["local-desktop", "docker"])
    ap.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=["bundled", "miniwob"])
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS"))
    args = ap.parse_args()
    run = (args.desktops, args.episodes_per_desktop, args.turns, args.environments, args.suites)
    with bootstrap_or_private(args.bootstrap, 39194) as bootstrap:
        asyncio.run(main(bootstrap, *run))
