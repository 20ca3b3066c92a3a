"""The worked example of docs/retrain.md, end to end on one machine: a recorded run, four retrains of it,
the runs side by side, and each final policy's held-out success.

1. A log of rollouts: the tiny Qwen3-VL (random weights) samples ``GROUPS`` groups of ``GROUP_SIZE``
   episodes of ``COMPLETION`` tokens each at temperature 1, with its own logprobs as the behaviour
   logprobs (what the engine records), each group on a prompt of its own. The reward is the share of
   even token ids in the completion: a synthetic task, so the example needs neither a desktop nor hours.
2. Run ``r1``: the real trainer (``cua-stream trainer``) over that log, one step per two groups.
3. Four retrains of it (``cua-stream retrain``): nothing changed, ``negative_scale`` 0, ``kl_coef`` 0.3,
   ``passes`` 2; then ``cua-stream runs compare`` (table and chart).
4. Each run's final policy sampled on held-out prompts: success (reward >= 0.5) with its 95 % Wilson
   interval.

    python scripts/retrain_example.py --bootstrap 127.0.0.1:9092 --out /tmp/retrain-example

Needs a broker (``cua-stream broker start``); about five minutes on two busy cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import torch

GROUPS, GROUP_SIZE, PER_STEP, COMPLETION, PROMPT = 16, 4, 2, 6, 8
HELD_OUT_PROMPTS, HELD_OUT_SAMPLES = 32, 4
RETRAINS = {
    "r1-same": [],
    "r1-neg0": ["trainer.negative_scale=0"],
    "r1-kl": ["trainer.kl_coef=0.3"],
    "r1-passes2": ["trainer.passes=2"],
}
SETTINGS = """[bus]
episode_partitions = 1

[trainer]
lr = 1e-3
keep_versions = 8
"""
"""One partition per episode topic: the live run's groups complete in the order they were recorded, so
its batches (and every number after them) are the same each time the script runs."""


def cli(*args: str) -> str:
    """One ``cua-stream`` command; its output (the script stops on a failure, with the command's)."""
    done = subprocess.run([sys.executable, "-m", "cua_stream", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cua-stream {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def sample(model: object, prompt: list[int], generator: torch.Generator) -> tuple[list[int], list[float]]:
    """``COMPLETION`` tokens sampled at temperature 1 after ``prompt``, with their logprobs."""
    from cua_stream.engine.forward import token_logprobs

    ids, logprobs = list(prompt), []
    with torch.no_grad():
        for _ in range(COMPLETION):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]  # type: ignore[operator]
            dist = token_logprobs(logits, 1.0)
            token = int(torch.multinomial(dist.exp(), 1, generator=generator))
            ids.append(token)
            logprobs.append(float(dist[token]))
    return ids[len(prompt) :], logprobs


def reward(completion: list[int]) -> float:
    return sum(1 for t in completion if t % 2 == 0) / len(completion)


def prompts(seed: int, n: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1000, 50000, (PROMPT,), generator=generator).tolist() for _ in range(n)]


async def record_rollouts(bus: object, model_dir: Path) -> None:
    """Step 1: the groups' turns and scores on the log, as the gateway and the scorer write them."""
    from transformers import AutoModelForImageTextToText

    from cua_stream.bus.producer import EventProducer
    from cua_stream.events import CallKind, Logprobs, Reward, ScoreEvent, TokenIds, TurnEvent
    from cua_stream.identity import episode_id_of, group_id_of
    from cua_stream.topics import SCORES, TURNS

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(1)
    async with EventProducer(bus) as producer:  # type: ignore[arg-type]
        for g, prompt in enumerate(prompts(0, GROUPS)):
            group = group_id_of("r1", g)
            for i in range(GROUP_SIZE):
                ids = {"run_id": "r1", "group_id": group, "episode_id": episode_id_of(group, i)}
                completion, logprobs = sample(model, prompt, generator)
                turn = TurnEvent(
                    **ids, seq=0, call_id=f"{ids['episode_id']}-c0", kind=CallKind.AGENT_TURN,
                    prompt_ids=TokenIds(prompt), completion_ids=TokenIds(completion),
                    completion_logprobs=Logprobs(logprobs), policy_version=0, finish_reason="length",
                    started_at=0.0,
                )  # fmt: skip
                score = ScoreEvent(
                    **ids, verdict=Reward(value=reward(completion)), policy_version=0, scored_at=0.0
                )
                await producer.send(TURNS, turn)
                await producer.send(SCORES, score)
        await producer.flush()


def held_out(model_dir: Path, weights: Path | None) -> tuple[int, int]:
    """Step 4: successes (reward >= 0.5) of the policy in ``weights`` on the held-out prompts."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(weights or model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(2)
    episodes = [
        sample(model, p, generator)[0] for p in prompts(99, HELD_OUT_PROMPTS) for _ in range(HELD_OUT_SAMPLES)
    ]
    return sum(reward(c) >= 0.5 for c in episodes), len(episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--out", type=Path, default=Path("retrain-example"))
    parser.add_argument("--prefix", default=f"retrain-example-{uuid.uuid4().hex[:6]}")
    args = parser.parse_args()
    from transformers.utils import logging as hf_logging

    from cua_stream.config import BusConfig
    from cua_stream.evaluation.stats import wilson

    hf_logging.disable_progress_bar()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "example.toml").write_text(SETTINGS)
    where = ["--bootstrap", args.bootstrap, "--prefix", args.prefix, "--config", str(out / "example.toml")]
    model = out / "model"
    if not (model / "config.json").is_file():
        cli("make-tiny-model", str(model))
    cli("topics", "create", *where)
    bus = BusConfig(bootstrap_servers=args.bootstrap, topic_prefix=args.prefix, episode_partitions=1)
    anyio.run(record_rollouts, bus, model)
    steps = GROUPS // PER_STEP
    print(f"prefix {args.prefix}: {GROUPS} groups of {GROUP_SIZE} recorded; training r1 ({steps} steps)")
    cli("trainer", "--run-id", "r1", "--model-path", str(model),
        "--group-size", str(GROUP_SIZE), "--groups-per-step", str(PER_STEP), "--max-staleness", "1000",
        "--max-steps", str(steps), "--checkpoint-dir", str(out / "ckpt" / "r1"), "--blob-dir", str(out / "blobs"),
        *where)  # fmt: skip
    for run, sets in RETRAINS.items():
        print(f"$ cua-stream retrain --from r1 --run-id {run} {' '.join(f'--set {s}' for s in sets)}")
        shown = cli("retrain", "--from", "r1", "--run-id", run, *(a for s in sets for a in ("--set", s)),
                    "--checkpoint-dir", str(out / "ckpt" / run), *where)  # fmt: skip
        print("\n".join(f"  {line}" for line in shown.splitlines()[:4]))
    print(cli("runs", "compare", "r1", *RETRAINS, "--chart", str(out / "compare.png"), *where))
    print(f"held-out success (reward >= 0.5), {HELD_OUT_PROMPTS} prompts x {HELD_OUT_SAMPLES} samples:")
    for run in ["base", "r1", *RETRAINS]:
        weights = None if run == "base" else out / "ckpt" / run / f"weights-v{steps}"
        won, n = held_out(model, weights)
        interval = wilson(won, n)
        print(f"  {run:<11} {won / n:.3f}  [{interval.low:.3f}, {interval.high:.3f}]  ({won}/{n})")


if __name__ == "__main__":
    main()
