"""The whole loop's speed, sync against async, side by side in one run: each configuration is the loop as
separate processes (the chaos tooling's daemons, faults 0: engine, gateway, scorer, producers with the
``scripted`` environment, trainer) on one local broker, trained to the same number of steps.

    .venv/bin/python bench/loop_sync_async.py [--steps 4] [--configs sync s1-drain s1-in_place ...]

Configurations: ``sync`` (``max_staleness 0``, ``drain``: the fleet waits for the step, the step for the
fleet) and ``s<k>-<mode>`` (async: ``max_staleness`` k = 1 or 2, ``weight_update`` drain, in_place or
retract). What makes the difference measurable, all injected so a loaded CPU machine shows it:
episodes with a long tail (``producer.scripted_long_fraction`` of them act ``scripted_long_factor``
times slower: a few long tasks among many short ones, as computer-use has), an engine whose decode round
takes ``engine.step_latency_s`` whatever its batch (as a GPU's does) and a trainer whose step takes
``trainer.min_step_s`` (a fixed step time).

Columns per configuration (``cua_stream.app.chaos.speed``): wall to N steps (from the first work request to
the N-th step's end) and its speed-up over sync; the engine's busy share of that wall (decode rounds,
from its ``/debug/scheduler``); the trainer's idle share (no batch to train: the steps' ``wait_s``) and
its training share; the trained tokens per staleness; the weight push's wall and the engine work it
loses per update (its wall less the decode slots used within it at the run's rate outside pushes; N-1
updates, the last push being in no record). Goals: async >= 1.7x sync; in_place / retract idle per
update <= 5 % of drain's.

Kept apart from ``bench/loop_async.py`` (one process, the update's stall alone, many updates cheaply):
this one pays a broker and seven daemons per configuration to measure what the whole loop gains.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import httpx
import yaml

from cua_stream.app.chaos import loop
from cua_stream.app.chaos.config import ChaosConfig
from cua_stream.app.chaos.speed import SYNC, EngineSample, LoopSpeed, goals, mean, summarise
from cua_stream.auth import bearer_headers
from cua_stream.broker import BrokerConfig, LocalBroker
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.events import TrainStep, WorkRequest
from cua_stream.topics import TRAIN_STEPS, WORK

CONFIGS = {SYNC: (0, "drain")} | {
    f"s{k}-{mode}": (k, mode) for k in (1, 2) for mode in ("drain", "in_place", "retract")
}
"""Name → (trainer.max_staleness, trainer.weight_update)."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    p.add_argument("--steps", type=int, default=4, help="steps each configuration trains")
    p.add_argument("--groups-per-step", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=4, help="episodes per producer at once")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--action-s", type=float, default=0.3, help="producer.scripted_action_latency_s")
    p.add_argument("--long-fraction", type=float, default=0.125, help="producer.scripted_long_fraction")
    p.add_argument("--long-factor", type=float, default=8.0, help="producer.scripted_long_factor")
    p.add_argument("--step-latency-s", type=float, default=0.02, help="engine.step_latency_s")
    p.add_argument("--train-s", type=float, default=2.0, help="trainer.min_step_s")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per configuration")
    p.add_argument("--base-port", type=int, default=29700)
    return p.parse_args()


async def sample_engine(url: str, key: str, into: list[EngineSample], every_s: float = 0.1) -> None:
    async with httpx.AsyncClient(timeout=5, headers=bearer_headers(key)) as http:
        while True:
            try:
                body = (await http.get(f"{url}/debug/scheduler")).json()
                into.append(EngineSample(time.time(), body["busy_s"], body["slot_s"]))
            except (httpx.HTTPError, KeyError, ValueError):
                pass  # starting or stopping
            await anyio.sleep(every_s)


def write_config(home: Path, settings: dict) -> Path:
    """The one config file every daemon reads (it holds the run's keys: this user's only)."""
    config_file = home / "loop.yaml"
    home.mkdir(parents=True, exist_ok=True)
    config_file.touch(mode=0o600)
    config_file.write_text(yaml.safe_dump(settings))
    return config_file


async def one_config(
    name: str, args: argparse.Namespace, broker: LocalBroker, model: Path, home: Path
) -> LoopSpeed | str:
    staleness, mode = CONFIGS[name]
    cfg = ChaosConfig(
        mode="fast", faults=0, steps=args.steps, groups_per_step=args.groups_per_step,
        group_size=args.group_size, max_staleness=staleness, producers=args.producers,
        concurrency=args.concurrency, turns=args.turns, max_new_tokens=args.max_new_tokens,
        base_port=args.base_port, home=str(home),
    )  # fmt: skip
    run_id = f"bench-{name.replace('_', '')}-{time.strftime('%H%M%S')}"
    bus = BusConfig(bootstrap_servers=broker.config.bootstrap_servers, topic_prefix=run_id)
    async with TopicAdmin(bus) as admin:
        await admin.create()
    keys = loop.Keys()
    settings = loop.settings(cfg, run_id, home, model, bus, keys)
    settings["engine"]["step_latency_s"] = args.step_latency_s
    settings["producer"] |= {
        "scripted_action_latency_s": args.action_s,
        "scripted_long_fraction": args.long_fraction,
        "scripted_long_factor": args.long_factor,
    }
    settings["trainer"] |= {"weight_update": mode, "min_step_s": args.train_s}
    daemons = loop.daemons(cfg, home, model, write_config(home, settings))
    trainer = daemons.pop("trainer")
    engine_url = settings["trainer"]["engine_url"]
    samples: list[EngineSample] = []
    try:
        for d in daemons.values():
            d.start()
        for d in daemons.values():
            if not await d.ready():
                return f"{d.name} did not start (see {d.log})"
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample_engine, engine_url, keys.engine, samples)
            trainer.start()
            assert trainer.proc is not None
            with anyio.move_on_after(args.timeout_s):
                await anyio.to_thread.run_sync(trainer.proc.wait, abandon_on_cancel=True)
            tg.cancel_scope.cancel()
        if trainer.exited() != 0:
            return f"the trainer did not finish {args.steps} steps in time (see {trainer.log})"
    finally:
        with anyio.CancelScope(shield=True):
            for d in [*daemons.values(), trainer]:
                await d.kill()  # a benchmark: no drain of the producers' last episodes
    steps = [d.event async for d in scan(bus, TRAIN_STEPS) if isinstance(d.event, TrainStep)]
    work = [d.event async for d in scan(bus, WORK) if isinstance(d.event, WorkRequest)]
    return summarise(steps, min(w.created_at for w in work), samples)


def staleness_text(counts: dict[int, int]) -> str:
    total = sum(counts.values()) or 1
    return " ".join(f"{lag}:{n / total:.0%}" for lag, n in counts.items())


def report(rows: dict[str, LoopSpeed | str], args: argparse.Namespace) -> None:
    print(
        f"{args.steps} steps of {args.groups_per_step}x{args.group_size} episodes; {args.producers}x"
        f"{args.concurrency} episodes at once, {args.turns} turns, actions {args.action_s:g} s "
        f"({args.long_fraction:.0%} of episodes x{args.long_factor:g}); decode round "
        f"{args.step_latency_s * 1e3:.0f} ms, <= {args.max_new_tokens} tokens a turn; train step {args.train_s:g} s"
    )
    done = {n: r for n, r in rows.items() if isinstance(r, LoopSpeed)}
    sync_wall = done[SYNC].wall_s if SYNC in done else float("nan")
    print(
        f"{'config':>11} | {'wall s':>7} {'vs sync':>7} | {'engine busy':>11} {'trainer idle':>12} "
        f"{'train':>5} | {'update s':>8} {'idle/update s':>13} | staleness of trained tokens"
    )
    for name, row in rows.items():
        if isinstance(row, str):
            print(f"{name:>11} | failed: {row}")
            continue
        print(
            f"{name:>11} | {row.wall_s:>7.1f} {sync_wall / row.wall_s:>6.2f}x | {row.engine_busy:>11.2f} "
            f"{row.trainer_idle:>12.2f} {row.trainer_train:>5.2f} | {mean(row.update_s):>8.2f} "
            f"{mean(row.update_idle_s):>13.3f} | {staleness_text(row.staleness)}"
        )
    for goal in goals(done):
        verdict = {True: "met", False: "NOT met", None: "not measured"}[goal.met]
        print(f"goal: {goal.name}: {goal.value:.3g} (target {goal.target:g}): {verdict}")


async def main() -> None:
    args = parse()
    from cua_stream.app.demo import tiny_model_dir

    model = await anyio.to_thread.run_sync(tiny_model_dir)
    rows: dict[str, LoopSpeed | str] = {}
    with tempfile.TemporaryDirectory(prefix="loop-sync-async-") as tmp:
        broker = LocalBroker(BrokerConfig(home=str(Path(tmp) / "broker"), port=args.base_port))
        await anyio.to_thread.run_sync(lambda: broker.start(fresh=True))
        try:
            for name in args.configs:
                started = time.monotonic()
                rows[name] = await one_config(name, args, broker, model, Path(tmp) / name)
                took = time.monotonic() - started
                print(
                    f"{name}: done in {took:.0f} s"
                    if isinstance(rows[name], LoopSpeed)
                    else f"{name}: {rows[name]}"
                )
        finally:
            await anyio.to_thread.run_sync(broker.stop)
    report(rows, args)


if __name__ == "__main__":
    anyio.run(main)
