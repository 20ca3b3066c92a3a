"""Can the policy model learn where to click from a task's screenshots, and from how many? An offline
probe for click-box (issue O): the desktop's own screenshots, taken from ``learn`` runs' trials, each
with its layout seed, so the target box is known; the model is trained on the reply a click needs
(``{"x": X, "y": Y}`` in computer-1's 0..999 grid) and asked, greedily, on screenshots it never saw.

    .venv/bin/python bench/grounding.py RUN_DIR [RUN_DIR ...] [--sizes tiny,small] [--held-out 64]
        [--epochs 8] [--prompt short|computer-1] [--train N | --synthetic N] [--budget-s 600]

No desktop, engine or Kafka: the model, its processor and chat template are ``cua-stream``'s own
(``models.tiny``); the screenshots are real (``desktop/logs/agent/screenshot_init.webp``, the first
screen the agent saw), each target found on its screen by its colour as the oracle finds it. With
``--synthetic N`` the model trains on N screens drawn from them instead (``synthetic``), and is still
measured on the real held-out screens. Success: the greedy click lands inside the target box, as the
task's verdict counts it; a blind policy's is the best fixed click's on the held-out screens (printed
beside it). ``--prompt computer-1`` puts the agent's real instructions (from the trial's
``prompt.txt``, ~4k tokens) before the screenshot, as GRPO's episodes have them; ``short`` a one-line
question. Model sizes run one after the other on the same examples and seed.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cua_stream.binding.coordinates import GRID_MAX
from cua_stream.tasks.blind import target_box
from cua_stream.tasks.pages import layout
from cua_stream.tasks.policies import find_color
from cua_stream.tasks.redraw import redraw

SHORT = "Click the colored box. Reply with the click's x and y on the 0-999 grid."
CLICK = re.compile(r'"x": (\d+), "y": (\d+)')
SYNTHETIC_SEEDS = 2**39
"""Synthetic layouts' seeds start here: apart from every real trial's (GRPO's below 2^32, demonstrations'
from 2^32, evaluations' and probes' from 2^40). Measurements before 2026-12-05 drew from 2^40, the
evaluations' first layouts: held-out screens of ``learn``'s evaluations had been drawn in training too."""


@dataclass(frozen=True)
class Shot:
    seed: int
    pixels: np.ndarray
    """The screen (H x W x RGB) the agent saw first."""
    instructions: str
    target: tuple[int, int, int, int]
    """The target box on this screen, in screen pixels (x, y, w, h): found by its colour, as the oracle
    finds it (the top panel is on some first screens and not others, so the page's offset varies)."""


def to_grid(pixels: np.ndarray, px: float, py: float) -> tuple[int, int]:
    h, w = pixels.shape[:2]
    return round(px / (w - 1) * GRID_MAX), round(py / (h - 1) * GRID_MAX)


def to_screen(pixels: np.ndarray, click: tuple[int, int]) -> tuple[float, float]:
    h, w = pixels.shape[:2]
    return click[0] / GRID_MAX * (w - 1), click[1] / GRID_MAX * (h - 1)


def centre(box: tuple[int, int, int, int]) -> tuple[float, float]:
    return box[0] + box[2] / 2, box[1] + box[3] / 2


def hits(box: tuple[int, int, int, int], point: tuple[float, float]) -> bool:
    """As the page's hit test counts a click: inside [x, x + w) by [y, y + h)."""
    return box[0] <= point[0] < box[0] + box[2] and box[1] <= point[1] < box[1] + box[3]


def shots(run_dirs: list[Path], task: str) -> tuple[list[Shot], int]:
    """Every trial of ``task`` under the runs whose first screen shows its target, one per layout seed;
    and how many first screens did not (the page not loaded yet)."""
    from PIL import Image

    found: dict[int, Shot] = {}
    unseen = 0
    for trial in sorted(d for run in run_dirs for d in (run / "trials").iterdir()):
        image = trial / "desktop/logs/agent/screenshot_init.webp"
        prompt = trial / "agent/episode-0/prompt.txt"
        if not image.exists() or not prompt.exists():
            continue
        seed = int(json.loads((trial / "config.json").read_text())["environment"]["env"]["CUA_TASK_SEED"])
        if seed in found or (task not in trial.name and "-grpo-" not in trial.name):
            continue
        lay = layout(task, seed)
        _, _, w, h = target_box(lay)
        pixels = np.asarray(Image.open(image).convert("RGB"))
        where = find_color(pixels, lay.element("target").color, aspect=w / h)
        if where is None:
            unseen += 1
            continue
        cx, cy = to_screen(pixels, where)
        text = ast.literal_eval(prompt.read_text())[-1]["content"][0]["text"]
        found[seed] = Shot(seed, pixels, text, (round(cx - w / 2), round(cy - h / 2), w, h))
    return list(found.values()), unseen


def synthetic(base: Shot, seed: int, task: str) -> Shot:
    """A first screen for layout ``seed`` drawn on ``base``'s (``tasks.redraw``, as ``learn --drawn-demos``
    draws them), then through lossy WebP as the desktop's screenshots are."""
    from PIL import Image

    from cua_stream.binding.screenshots import encode

    new = redraw(base.pixels, layout(task, base.seed), layout(task, seed))
    if new is None:
        raise ValueError(f"layout {base.seed}'s target is not on its first screen")
    data = encode(Image.fromarray(new.pixels), "WEBP")
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return Shot(seed, pixels, base.instructions, new.target)


def blind(boxes: list[tuple[int, int, int, int]], step: int = 4) -> float:
    """The best fixed click's success over ``boxes`` (screen pixels; points every ``step`` px). Not
    ``tasks.blind.best_fixed_click``: that one counts page pixels per layout, and the page's place on
    the screen varies here (the top panel)."""
    best = 0
    for px in range(0, 800, step):
        for py in range(0, 600, step):
            best = max(best, sum(1 for b in boxes if hits(b, (px, py))))
    return best / len(boxes)


class Probe:
    """One model size's run: examples tokenized once, trained in epochs, measured after each."""

    def __init__(self, size: str, seed: int, prompt: str) -> None:
        import torch

        from cua_stream.models.tiny import build_model, build_processor, build_tokenizer

        self.torch = torch
        torch.manual_seed(seed)
        self.tok = build_tokenizer()
        self.proc = build_processor(self.tok)
        self.model = build_model(seed, size).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
        self.prompt = prompt

    def inputs(self, shot: Shot) -> dict[str, Any]:
        from PIL import Image

        text = SHORT if self.prompt == "short" else shot.instructions
        messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
        rendered = self.proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        image = Image.fromarray(shot.pixels)
        return dict(self.proc(text=[rendered], images=[image], return_tensors="pt"))

    def example(self, shot: Shot, click: tuple[int, int]) -> dict[str, Any]:
        torch = self.torch
        x = self.inputs(shot)
        reply = self.tok(json.dumps({"x": click[0], "y": click[1]}) + "<|im_end|>")["input_ids"]
        ids = torch.cat([x["input_ids"], torch.tensor([reply])], dim=1)
        per_token = {  # the processor's per-token rows (token types), extended over the reply
            k: torch.cat([v, v.new_zeros((1, len(reply)))], dim=1)
            for k, v in x.items()
            if k != "input_ids" and v.dim() == 2 and v.shape[1] == x["input_ids"].shape[1]
        }
        return x | per_token | {"input_ids": ids, "attention_mask": torch.ones_like(ids), "reply": len(reply)}

    def epoch(self, examples: list[dict[str, Any]], rng: random.Random) -> float:
        losses = []
        for ex in rng.sample(examples, len(examples)):
            # logits only where the reply is predicted: the 152k-row head over every position is most
            # of a forward otherwise (the trainer's backend does the same)
            reply = ex["reply"]
            inputs = {k: v for k, v in ex.items() if k != "reply"}
            logits = self.model(**inputs, logits_to_keep=reply + 1).logits[0, :-1]
            loss = self.torch.nn.functional.cross_entropy(logits.float(), ex["input_ids"][0, -reply:])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(float(loss.detach()))
        return sum(losses) / len(losses)

    def click(self, x: dict[str, Any]) -> tuple[int, int] | None:
        """The greedy click for one screen's ``inputs``."""
        with self.torch.no_grad():
            out = self.model.generate(**x, max_new_tokens=16, do_sample=False)
        m = CLICK.search(self.tok.decode(out[0, x["input_ids"].shape[1] :]))
        return (int(m[1]), int(m[2])) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="learn run directories (<state>/learn/<run>)")
    ap.add_argument("--task", default="click-box")
    ap.add_argument("--sizes", default="tiny", help="Comma-separated model sizes (models.tiny.SIZES).")
    ap.add_argument("--prompt", choices=("short", "computer-1"), default="short")
    ap.add_argument("--held-out", type=int, default=64)
    ap.add_argument("--train", type=int, default=0, help="Real training screens (0: all but the held-out).")
    ap.add_argument("--synthetic", type=int, default=0, help="Train on this many drawn screens instead.")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=600.0, help="Per configuration; ends after an epoch.")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    items, unseen = shots(args.runs, args.task)
    rng = random.Random(args.seed)
    rng.shuffle(items)
    held, real = items[: args.held_out], items[args.held_out :]
    real = real[: args.train] if args.train else real
    drawn = [synthetic(rng.choice(real), SYNTHETIC_SEEDS + i, args.task) for i in range(args.synthetic)]
    train = drawn or real
    fidelity = [
        np.abs(synthetic(s, s.seed, args.task).pixels.astype(int) - s.pixels).mean() for s in held[:8]
    ]
    print(
        f"{len(items)} first screens of {args.task} show the target ({unseen} did not); held out {len(held)}, "
        f"trained on {len(train)} {'drawn' if drawn else 'real'}; a drawn screen differs from the real one "
        f"of its layout by {np.mean(fidelity):.2f} levels a pixel (of 255); blind (best fixed click on the "
        f"held-out screens): {blind([s.target for s in held]):.2f}"
    )
    for size in args.sizes.split(","):
        probe = Probe(size, args.seed, args.prompt)
        t0 = time.monotonic()
        examples = [probe.example(s, to_grid(s.pixels, *centre(s.target))) for s in train]
        asked = [probe.inputs(s) for s in held]  # processed once, asked after every epoch
        print(
            f"[{size}, {args.prompt} prompt] {examples[0]['input_ids'].shape[1]} tokens an example; "
            f"tokenized in {time.monotonic() - t0:.0f} s"
        )
        start = time.monotonic()
        for epoch in range(1, args.epochs + 1):
            loss = probe.epoch(examples, rng)
            trained_s = time.monotonic() - start
            clicks = [probe.click(x) for x in asked]
            ok = sum(
                1 for s, c in zip(held, clicks, strict=True) if c and hits(s.target, to_screen(s.pixels, c))
            )
            parsed = sum(1 for c in clicks if c)
            print(
                f"  epoch {epoch} ({epoch * len(examples)} examples seen, {trained_s:.0f} s): loss {loss:.3f}; "
                f"held-out success {ok}/{len(held)} = {ok / len(held):.2f}, {parsed} replies parsed",
                flush=True,
            )
            if time.monotonic() - start > args.budget_s:
                break


if __name__ == "__main__":
    main()
