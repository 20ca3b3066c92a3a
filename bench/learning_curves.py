"""Several `cua-stream learn` runs side by side, against issue O's goal: per run its GRPO curve's first
``window`` steps against its last, how often a shuffled order of the same steps rises as much
(``cua_stream.app.learn.trend``), the slope, the thirds, and held-out success beside the blind baseline;
then the runs pooled (each run's steps shuffled within the run, the rises summed).

    .venv/bin/python bench/learning_curves.py RUN [RUN ...] [--window 3] [--goal 0.2] [--minutes 60]

RUN: a ``learn`` run's folder (``<home>/learn/<run>``) or its ``curve.json``. Reads files only.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cua_stream.app.learn.trend import SHUFFLES, rise, trend


def load(path: Path) -> dict[str, Any]:
    file = path / "curve.json" if path.is_dir() else path
    if not file.is_file():
        raise SystemExit(f"{path}: no curve.json (give a learn run's folder or its curve.json)")
    try:
        curve = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SystemExit(f"{file}: not a learn run's curve.json ({e})") from None
    if not isinstance(curve, dict) or not isinstance(curve.get("overall"), list):
        raise SystemExit(f"{file}: not a learn run's curve.json (no 'overall' list of step rewards)")
    return curve


def held_out(curve: dict[str, Any]) -> str:
    """``blind / base / sft / grpo`` success over all tasks, as ``learn``'s table has it."""
    rows = {row["task"]: row["cells"] for row in curve.get("table", [])}
    cells = rows.get("overall", {})
    return " / ".join(
        f"{c['successes']}/{c['scored']}" if name != "blind" else f"{c['rate']:.2f}"
        for name in ("blind", "base", "sft", "grpo")
        if (c := cells.get(name))
    )


def pooled_p(curves: list[list[float]], window: int, shuffles: int = SHUFFLES, seed: int = 0) -> float:
    """How often the runs, each shuffled within itself, rise as much in sum as they did."""
    observed = sum(rise(c, window) for c in curves)
    rng, orders = random.Random(seed), [list(c) for c in curves]
    as_high = 0
    for _ in range(shuffles):
        for order in orders:
            rng.shuffle(order)
        as_high += sum(rise(o, window) for o in orders) >= observed - 1e-12
    return (as_high + 1) / (shuffles + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--window", type=int, default=3, help="steps averaged at each end (learn's default)")
    parser.add_argument("--goal", type=float, default=0.2, help="the rise the goal asks of every run")
    parser.add_argument("--minutes", type=float, default=60.0, help="GRPO's wall clock the goal allows")
    args = parser.parse_args()
    if args.window < 1:
        parser.error("--window: at least 1")
    loaded = [(path, load(path)) for path in args.runs]
    curves, met, beyond = [], 0, 0
    print(f"{'run':<34} {'steps':>5} {'GRPO min':>8}  rise (p)         slope/10 (p)     thirds            "
          "held-out blind / base / sft / grpo")  # fmt: skip
    for path, curve in loaded:
        values, minutes = curve["overall"], curve.get("timings_s", {}).get("GRPO", float("nan")) / 60
        t = trend(values, args.window)
        name = path.name if path.is_dir() else path.parent.name or path.name
        if t is None:
            print(f"{name:<34} {len(values):>5} {minutes:>8.1f}  under 2 steps: no curve")
            continue
        curves.append(values)
        met += t.rise >= args.goal and minutes <= args.minutes
        beyond += t.p_rise < 0.05
        thirds = " / ".join(f"{v:.2f}" for v in t.thirds)
        print(f"{name:<34} {len(values):>5} {minutes:>8.1f}  {t.rise:+.3f} ({t.p_rise:.2f})  "
              f"{t.slope * 10:+.3f} ({t.p_slope:.2f})  {thirds:<17} {held_out(curve)}")  # fmt: skip
    if not curves:
        raise SystemExit("no run with 2 or more GRPO steps")
    print(f"goal (last {args.window} - first {args.window} >= {args.goal} within {args.minutes:.0f} min of GRPO): "
          f"met in {met} of {len(args.runs)} runs; a rise beyond shuffled noise (p < 0.05) in {beyond}")  # fmt: skip
    mean_rise = sum(rise(c, args.window) for c in curves) / len(curves)
    print(f"pooled: mean rise {mean_rise:+.3f}; the runs shuffled within themselves rise as much in sum "
          f"p={pooled_p(curves, args.window):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
