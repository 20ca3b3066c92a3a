"""Engine busy: whether the async producer loop keeps one engine busy at the episode concurrency the
capacity model plans per GPU. The daemon's own ``Producer`` (work consumer group, admission, sessions,
outcomes on Kafka) runs the ``scripted`` environment (LiteLLM chat completions with every screenshot of
the history, a fresh screenshot drawn each turn, an injected action time) through the real gateway (its
own process, as ``bench/stream_load.py`` starts it) against the simulated engine
(``bench/fixtures/sim_engine.py``: a cited latency model of an 8B model on one H100, a fixture).

    .venv/bin/python bench/engine_busy.py [--episodes 2 4 8 16 32] [--speedup 2] [--seconds 8]
        [--warmup 4] [--action-s 2.8] [--completion-tokens 240] [--bootstrap host:port]

Each point: a fresh topic prefix, enough work for the point, the producer at ``concurrency`` = the
point's episodes, starts paced over one turn (``max_starts_per_s`` = episodes / turn: a fleet in steady
state is not in step) and each group's reply length drawn from half to one and a half
``--completion-tokens`` (so episodes drift out of step, as a fleet's do), ``--warmup`` seconds
unmeasured, then the engine's own stats over ``--seconds``.
``--speedup k`` runs the engine and the action time k times faster, so the loop is the same at k times
the turns/s: it shows where this machine's CPU, not the loop, caps the engine's busy share.

Columns: episodes; engine busy (modelled time with a request in service / wall); the busy share the
independent-episodes model predicts (``predicted_busy``) from the latency model's turn (``model``) and
from the turn measured (``model*``); mean decode batch; turns/s; where a turn went (ms, at the run's
speed: ``turn_split``): in the engine, the injected action, and the loop's own time (the producer,
LiteLLM, the screenshot, the gateway, HTTP, and waiting for a core); prefilled and generated tokens a
turn; CPU ms a turn of the producer (this process) and the gateway; the producer's, the gateway's and
the engine's cores; the machine's 1-minute load (above its cores every process waits for a share of
one). Without ``--bootstrap`` a local broker is started (Java needed). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import random
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fixtures.latency_model import LatencyModel

TARGET_BUSY = 0.9
"""The issue's goal: the engine busy at least this share of the time."""
SCREENSHOT_TOKENS = 600
"""New prompt tokens a turn prefills (a screenshot of the scripted desktop and the reply before it), for
the predicted generation time only; the run itself prefills what the gateway renders."""


# -- pure: the model of the loop, the work to publish, the crossing --------------------------------


def generation_s(
    model: LatencyModel, completion_tokens: int, new_prompt_tokens: int, batch: int = 1
) -> float:
    """One turn's generation by the latency model: its new prompt tokens prefilled in one step, then a
    decode step per token after the first (which the prefill samples), at ``batch`` running requests."""
    return (model.prefill_ms(new_prompt_tokens) + (completion_tokens - 1) * model.decode_ms(batch)) / 1e3


def predicted_busy(episodes: int, generation_share: float) -> float:
    """The engine's busy share if each of ``episodes`` independent episodes spends ``generation_share`` of
    its turn waiting on the engine: idle only while none is (a lower bound on what batching needs, and
    optimistic where episodes move in step)."""
    if not 0 <= generation_share <= 1 or episodes < 0:
        raise ValueError("generation_share in [0, 1], episodes >= 0")
    return 1.0 - (1.0 - generation_share) ** episodes


def episodes_for_busy(target: float, generation_share: float) -> int:
    """The fewest independent episodes that keep the engine busy ``target`` of the time."""
    if not 0 < target < 1 or not 0 < generation_share <= 1:
        raise ValueError("target in (0, 1), generation_share in (0, 1]")
    if generation_share == 1:
        return 1
    return max(1, math.ceil(math.log(1 - target) / math.log(1 - generation_share) - 1e-9))


def completion_tokens(rng: random.Random, mean: int) -> int:
    """A group's reply length, uniform over half to one and a half ``mean``: replies vary, so episodes
    started a turn apart drift out of step as a fleet's do (equal lengths and action times would keep
    the start pacing's even spacing forever, the best case for the engine)."""
    return rng.randint(max(1, mean // 2), max(1, mean * 3 // 2))


def work_for_point(episodes: int, point_s: float, episode_s: float) -> int:
    """Work requests that keep ``episodes`` slots full for ``point_s`` seconds of ``episode_s`` episodes,
    with one episode each to spare (a short run must never starve: the engine would idle for want of
    work, not of the loop)."""
    if episodes < 1 or point_s < 0 or episode_s <= 0:
        raise ValueError("episodes >= 1, point_s >= 0, episode_s > 0")
    return episodes * (math.ceil(point_s / episode_s) + 1)


@dataclass(frozen=True)
class TurnSplit:
    """Where an episode's turn went, measured over a window: in the engine, in the action, and the rest
    (the loop's own time: the producer, LiteLLM, the screenshot, the gateway, HTTP)."""

    turn_s: float
    engine_s: float
    action_s: float
    loop_s: float
    engine_share: float
    """The share of each episode's time spent waiting on the engine."""


def turn_split(
    episodes: int, wall_s: float, requests: int, answered: int, service_s: float, action_s: float
) -> TurnSplit:
    """From the engine's counts over ``wall_s`` with ``episodes`` slots full: ``requests`` arrived (one a
    turn), ``answered`` of them answered within it, spending ``service_s`` in the engine in all;
    ``action_s`` the injected action time a turn."""
    if episodes < 1 or wall_s <= 0 or requests < 1 or answered < 1:
        raise ValueError("episodes >= 1, wall_s > 0, requests >= 1, answered >= 1")
    turn = episodes * wall_s / requests
    engine = service_s / answered
    return TurnSplit(turn, engine, action_s, turn - engine - action_s, min(1.0, engine / turn))


def first_crossing(points: Sequence[tuple[int, float]], target: float) -> int | None:
    """The fewest episodes whose measured busy share reached ``target`` (points: episodes, busy), None if
    no point did."""
    reached = [n for n, busy in points if busy >= target]
    return min(reached) if reached else None


# -- the run ----------------------------------------------------------------------------------------


async def one_point(args: argparse.Namespace, n: int, gateway_url: str, engine_url: str,
                    pids: dict[str, int], turn_s: float) -> dict[str, Any]:  # fmt: skip
    import anyio
    import httpx

    from bench.stream_load import cpu_s
    from consumers.trainer.stream.feeder import work_for_group
    from cua_stream.bus.admin import TopicAdmin
    from cua_stream.bus.producer import EventProducer
    from cua_stream.config import BusConfig
    from cua_stream.topics import WORK
    from producers.config import ProducerConfig
    from producers.daemon import Producer

    bus = BusConfig(bootstrap_servers=args.bootstrap, topic_prefix=f"busy-{uuid.uuid4().hex[:8]}",
                    episode_partitions=4)  # fmt: skip
    async with TopicAdmin(bus) as admin:
        await admin.create()
    episode_s = args.turns * turn_s
    wanted = work_for_point(n, 2 * turn_s + args.warmup + args.seconds + 10, episode_s)
    rng = random.Random(n)
    work = [w for g in range(math.ceil(wanted / 4)) for w in work_for_group(
        "busy", g, tasks=["t"], group_size=4, policy_version=0, now=0,
        sampling={"temperature": 1.0, "max_new_tokens": completion_tokens(rng, args.completion_tokens)})]  # fmt: skip
    async with EventProducer(bus) as out:
        for w in work:
            await out.publish(WORK, w)
    config = ProducerConfig(
        gateway_url=gateway_url,
        environment="scripted",
        concurrency=n,
        bus=bus,
        max_turns=args.turns,
        scripted_action_latency_s=args.action_s / args.speedup,
        max_starts_per_s=n / turn_s,  # spread over one turn, as a fleet in steady state is
    )
    producer = Producer(config)
    async with httpx.AsyncClient(base_url=engine_url) as engine, anyio.create_task_group() as tg:
        stop = anyio.Event()
        await tg.start(lambda task_status: producer.run(stop=stop, task_status=task_status))
        await anyio.sleep(turn_s + args.warmup)  # the starts spread over one turn, then the warm-up
        await engine.post("/sim/reset")
        me0, gw0, en0, t0 = own_cpu_s(), cpu_s(pids["gateway"]), cpu_s(pids["engine"]), time.monotonic()
        await anyio.sleep(args.seconds)
        wall = time.monotonic() - t0
        me1, gw1, en1 = own_cpu_s(), cpu_s(pids["gateway"]), cpu_s(pids["engine"])
        stats = (await engine.get("/sim/stats")).json()
        stop.set()
        tg.cancel_scope.cancel()
    split = turn_split(n, wall, max(1, int(stats["requests"])), max(1, int(stats["answered"])),
                       stats["service_s"], args.action_s / args.speedup)  # fmt: skip
    return {
        "episodes": n,
        "split": split,
        "model_measured": predicted_busy(n, split.engine_share),
        "busy": stats["busy_fraction"],
        "prefill_per_turn": stats["prefilled_tokens"] / max(1, stats["requests"]),
        "tokens_per_turn": stats["generated_tokens"] / max(1, stats["requests"]),
        "batch": stats["mean_batch"],
        "turns_per_s": stats["requests"] / wall,
        "producer_cores": (me1 - me0) / wall,
        "producer_cpu_ms": (me1 - me0) / max(1, stats["requests"]) * 1e3,
        "gateway_cpu_ms": (gw1 - gw0) / max(1, stats["requests"]) * 1e3,
        "gateway_cores": (gw1 - gw0) / wall,
        "engine_cores": (en1 - en0) / wall,
        "load_1m": os.getloadavg()[0],
        "published": producer.published,
    }


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def sweep(args: argparse.Namespace, gateway_url: str, engine_url: str, pids: dict[str, int],
                turn_s: float, share: float) -> list[dict[str, Any]]:  # fmt: skip
    import anyio

    from producers.daemon import warm_imports

    await anyio.to_thread.run_sync(warm_imports, "scripted")
    points = []
    print(f"{'episodes':>8} {'busy':>5} {'model':>5} {'model*':>6} {'batch':>5} {'turns/s':>7} {'turn ms':>7} "
          f"{'engine':>6} {'action':>6} {'loop':>5} {'prefill':>7} {'gen':>4} | {'cpu ms/turn':>11} | {'producer':>8} {'gateway':>7} {'engine':>6} {'load':>5}")  # fmt: skip
    for n in args.episodes:
        p = await one_point(args, n, gateway_url, engine_url, pids, turn_s)
        p["model"] = predicted_busy(n, share)
        points.append(p)
        t: TurnSplit = p["split"]
        print(f"{n:>8} {p['busy']:>5.2f} {p['model']:>5.2f} {p['model_measured']:>6.2f} {p['batch']:>5.1f} "
              f"{p['turns_per_s']:>7.1f} {t.turn_s * 1e3:>7.0f} {t.engine_s * 1e3:>6.0f} {t.action_s * 1e3:>6.0f} "
              f"{t.loop_s * 1e3:>5.0f} {p['prefill_per_turn']:>7.0f} {p['tokens_per_turn']:>4.0f} | {p['producer_cpu_ms']:>5.1f} {p['gateway_cpu_ms']:>5.1f} | {p['producer_cores']:>8.2f} {p['gateway_cores']:>7.2f} "
              f"{p['engine_cores']:>6.2f} {p['load_1m']:>5.1f}", flush=True)  # fmt: skip
    return points


def main() -> None:
    from bench.stream_load import renderer_of_tiny_model, start
    from cua_stream.capacity import Deployment

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    ap.add_argument("--speedup", type=float, default=2.0, help="engine and actions k times faster")
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per point")
    ap.add_argument("--warmup", type=float, default=4.0, help="unmeasured seconds after the starts")
    ap.add_argument("--action-s", type=float, default=2.8, help="an action's seconds, before the speedup")
    ap.add_argument("--completion-tokens", type=int, default=240)
    ap.add_argument("--turns", type=int, default=10, help="turns per episode")
    ap.add_argument("--port", type=int, default=39610, help="the gateway's (the engine's is the next)")
    ap.add_argument("--bootstrap", default=os.environ.get("CUA_BOOTSTRAP_SERVERS", ""))
    args = ap.parse_args()
    model = LatencyModel()
    gen = generation_s(model, args.completion_tokens, SCREENSHOT_TOKENS)
    share = gen / (gen + args.action_s)
    turn_s = (gen + args.action_s) / args.speedup
    planned = Deployment(gpus=1).episodes_per_gpu
    print(f"model: {gen:.2f} s of generation + {args.action_s:g} s of action a turn (generation share "
          f"{share:.2f}); busy >= {TARGET_BUSY:g} needs {episodes_for_busy(TARGET_BUSY, share)} independent "
          f"episodes; the capacity model plans {planned} per GPU (predicted busy "
          f"{predicted_busy(planned, share):.3f}); speedup {args.speedup:g}")  # fmt: skip
    here = Path(__file__).resolve()
    engine_port = args.port + 1
    engine_url = f"http://127.0.0.1:{engine_port}"
    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        if not args.bootstrap:
            from cua_stream.broker import BrokerConfig, LocalBroker

            broker = LocalBroker(BrokerConfig(home=tmp + "/broker", port=39693, heap_mb=1024))
            broker.start()
            args.bootstrap = broker.config.bootstrap_servers
        im_end = renderer_of_tiny_model().im_end_id
        engine = start([str(here.parent / "fixtures" / "sim_engine.py"), "--port", str(engine_port),
                        "--im-end", str(im_end), "--speedup", str(args.speedup)], engine_port)  # fmt: skip
        # records encoded as for Kafka and dropped: the loop under test is the producer's, not the bus's
        gateway = start([str(here.parent / "stream_load.py"), "--serve-gateway", str(args.port), engine_url,
                         tmp, "", "unused"], args.port)  # fmt: skip
        try:
            points = asyncio.run(sweep(args, f"http://127.0.0.1:{args.port}", engine_url,
                                       {"gateway": gateway.pid, "engine": engine.pid}, turn_s, share))  # fmt: skip
        finally:
            for process in (gateway, engine):
                process.terminate()
                process.wait(timeout=30)
            if broker is not None:
                broker.stop()
    crossed = first_crossing([(p["episodes"], p["busy"]) for p in points], TARGET_BUSY)
    print(f"busy >= {TARGET_BUSY:g} first at: {crossed if crossed else 'no point'} episodes")
    for p in points:
        print(f"{p['episodes']:>8} episodes: measured / predicted busy {p['busy'] / p['model']:.2f}x")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    main()
