"""The torch backend's optimizer: AdamW fused (one kernel per tensor, what the backend uses) against
AdamW unfused (torch's default, what it used before), side by side in one run (rounds alternate,
medians compared).

    .venv/bin/python bench/trainer_optimizer.py [--size tiny|small] [--turns 1] [--batch 1] [--rounds 6]

Each round is one SFT step (``TorchBackend.sft_step``) on ``--batch`` copies of an episode of ``--turns``
screenshot turns (``bench/trainer_logits.py``'s sample). Both optimizers start from the same weights and
see the same gradients; after the rounds their weights must agree to float rounding (checked), so the
difference is time only. The 152k-row embedding and head are most of the weights: the smaller the step's
forward and backward, the larger the optimizer's share.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from trainer_logits import episode  # also sets the offline environment

from consumers.trainer.backends.torch_backend import TorchBackend
from consumers.trainer.episodes.samples import assemble
from cua_stream.blobs import LocalBlobStore
from cua_stream.models.tiny import SIZES, make_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=tuple(SIZES), default="tiny")
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(Path(tmp) / "model", size=args.size)
        blobs = LocalBlobStore(Path(tmp) / "blobs")
        (sample,) = assemble([episode(model_dir, blobs, args.turns)]).samples
        backends = {
            "fused": TorchBackend(model_dir, blobs, lr=1e-3),
            "unfused": TorchBackend(model_dir, blobs, lr=1e-3),
        }
        unfused = backends["unfused"]
        unfused.optimizer = torch.optim.AdamW(unfused.model.parameters(), lr=1e-3)
        weights = sum(p.numel() for p in unfused.model.parameters())
        print(
            f"{args.size}: {weights / 1e6:.1f}M weights; a step: {args.batch} x {len(sample.tokens)} tokens"
        )
        times: dict[str, list[float]] = {name: [] for name in backends}
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for name, backend in backends.items():
                started = time.perf_counter()
                backend.sft_step([sample] * args.batch)
                if round_:
                    times[name].append(time.perf_counter() - started)
        gap = max(
            float((a - b).detach().abs().max())
            for a, b in zip(backends["fused"].model.parameters(), unfused.model.parameters(), strict=True)
        )
        assert gap < 1e-4, f"the two optimizers' weights differ by {gap}"
        fused, plain = (statistics.median(times[k]) for k in ("fused", "unfused"))
        print(
            f"median s a step: unfused {plain:.3f}, fused {fused:.3f}; speed-up {plain / fused:.2f}x; "
            f"weights apart by {gap:.1e} after {args.rounds + 1} steps"
        )


if __name__ == "__main__":
    main()
