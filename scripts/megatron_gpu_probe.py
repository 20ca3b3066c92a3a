"""Megatron's Qwen3-VL trained on a GPU against a bfloat16 engine, on a host with no network (issue N):
the logprob gap between trainer and engine, the step time and the weight-update time, over a few GRPO steps.

    python scripts/megatron_gpu_probe.py FILES_DIR [--device cuda] [--steps 3] [--report OUT.json]

Runs in megatron-bridge's environment: ``scripts/megatron-env.sh``'s venv, or a GPU host's own Python with
torch, where megatron-core 0.19.2, megatron-bridge 0.6.2 and transformers 5.12.1 arrived as wheels (a lent
GPU machine here reaches no package index). ``FILES_DIR``: the tiny model's files but its weights
(config.json, the tokenizer's and the processor's files); the weights are made on the host from the config,
with the tiny model's seed and shaping (``cua_stream.models.tiny``: transformers only), so what travels stays
small (the weights alone are 78 MB) and reply lengths are fixed (the stop token's row zeroed).

The engine is Hugging Face transformers' Qwen3-VL in bfloat16 on the same device, sampling ``--group``
replies per prompt (each prompt with its own image) with their decode-time logprobs. In production SGLang
serves (``scripts/gpu-check.sh`` runs the whole loop against it), but its environment (6 GB) cannot travel
to a host without a network; this probe checks the trainer's side of the contract: Megatron's logprobs in
bf16 against a bf16 engine's, and the weights' round trip. Per step: the engine samples; the worker's
``Trainer`` (bf16 weights, float32 AdamW masters) takes one GRPO step over the replies, its statistics
giving the project's ``logprob_gap`` (mean |trainer - engine| over the replies' tokens, before the update);
the weights are exported (megatron-bridge's export, as the daemon pushes them) and the engine reloads them
from disk (as SGLang's ``/update_weights_from_disk``). The reward is synthetic (a reply's share of tokens
from the lower half of the vocabulary): it spreads each group's advantages; nothing here is about learning.

Prints one line per step and a summary; exits 1 when a step's gap is over ``--max-gap`` (the seed's live
check measured 0.012-0.017 between Megatron and SGLang), or when an update did not reach the engine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # cua_stream.models.tiny (transformers only)
# the worker as it runs (by its file): its own folder first on the path, where it finds megatron_cpu
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "consumers/trainer/backends/megatron"))

from worker import Trainer

from cua_stream.models.tiny import IM_END_ID, IMAGE_PAD_ID, build_model

PROMPTS = (("Click the red button.", (224, 160)), ("Type the word in the box.", (160, 96)))
"""Each prompt with the size of its (random) screenshot: the images differ, so do their token counts."""


def sync(device: str) -> float:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


MID_SHAPE = {
    "text_config": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "vision_config": {
        "hidden_size": 512,
        "depth": 8,
        "num_heads": 8,
        "intermediate_size": 2048,
        "out_hidden_size": 1024,
        "deepstack_visual_indexes": [2, 4, 6],
        "num_position_embeddings": 2304,
    },
}
"""``--shape mid``: Qwen3-0.6B's language model (28 layers of width 1024; M-RoPE sections 24/20/20 of its
128-wide heads) under an 8-block vision tower, 804M parameters with the real vocabulary: times that are
not only overheads. Still random weights."""


def make_model_dir(files: Path, out: Path, seed: int, shape: str = "tiny") -> Path:
    """The model's weights made here from ``files``' config (``shape`` ``mid``: resized to ``MID_SHAPE``),
    saved beside copies of its other files."""
    from transformers import Qwen3VLConfig

    out.mkdir(parents=True, exist_ok=True)
    settings = json.loads((files / "config.json").read_text())
    if shape == "mid":
        for part, sizes in MID_SHAPE.items():
            settings[part].update(sizes)
        settings["text_config"]["rope_parameters"]["mrope_section"] = [24, 20, 20]
    model = build_model(seed, config=Qwen3VLConfig.from_dict(settings))
    with torch.no_grad():
        model.lm_head.weight[IM_END_ID] = 0.0  # replies run to their token budget
    model.save_pretrained(out)
    for src in files.iterdir():
        if src.is_file() and not (out / src.name).exists():
            shutil.copyfile(src, out / src.name)
    return out


def load_engine(model_dir: Path, device: str, dtype: torch.dtype) -> Any:
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=dtype).to(device).eval()


def prompt_inputs(model_dir: Path, seed: int) -> list[dict[str, torch.Tensor]]:
    """Each prompt as the engine reads it: token ids (one image pad token per merged patch), pixels, grid.
    The image processor's PIL backend (with the checkpoint's settings) and the tokenizer apart: the whole
    processor, and transformers' default image processor, need torchvision, which megatron-bridge's venv
    does not hold."""
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    settings = json.loads((model_dir / "processor_config.json").read_text())["image_processor"]
    settings.pop("image_processor_type", None)
    images = Qwen2VLImageProcessorPil(**settings)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(seed)
    out = []
    for text, (width, height) in PROMPTS:
        pixels = torch.randint(0, 256, (height, width, 3), generator=generator, dtype=torch.uint8)
        image = images(images=[Image.fromarray(pixels.numpy())], return_tensors="pt")
        pads = int(image["image_grid_thw"].prod()) // images.merge_size**2
        chat = (
            f"<|im_start|>user\n<|vision_start|>{'<|image_pad|>' * pads}<|vision_end|>"
            f"{text}<|im_end|>\n<|im_start|>assistant\n"
        )
        ids = tokenizer(chat, return_tensors="pt")["input_ids"]
        out.append({"input_ids": ids, **{k: image[k] for k in ("pixel_values", "image_grid_thw")}})
    return out


def modality(ids: torch.Tensor) -> torch.Tensor:
    """Per token 1 for an image's, else 0: what transformers' Qwen3-VL needs to place M-RoPE's positions
    (the processor's ``mm_token_type_ids``)."""
    return (ids == IMAGE_PAD_ID).long()


def sample(engine: Any, prompt: dict[str, torch.Tensor], group: int, tokens: int, device: str) -> Any:
    """``group`` replies of ``tokens`` tokens each: the sequences (prompt + reply) and each reply token's
    logprob as the engine computed it while decoding (temperature 1, the whole vocabulary)."""
    ids = prompt["input_ids"].repeat(group, 1).to(device)
    out = engine.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=modality(ids),
        pixel_values=prompt["pixel_values"].repeat(group, 1).to(device, engine.dtype),
        image_grid_thw=prompt["image_grid_thw"].repeat(group, 1).to(device),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=tokens,
        min_new_tokens=tokens,
        output_logits=True,
        return_dict_in_generate=True,
    )
    replies = out.sequences[:, ids.shape[1] :]
    logits = torch.stack(out.logits, dim=1).float()  # (group, tokens, vocab): before any sampling warper
    logprobs = torch.log_softmax(logits, dim=-1).gather(2, replies.unsqueeze(2)).squeeze(2)
    return out.sequences.cpu(), logprobs.cpu()


def prefill_logprobs(
    engine: Any, prompt: dict[str, torch.Tensor], sequences: torch.Tensor, device: str
) -> Any:
    """Each reply token's logprob from one forward pass over the whole sequences (the engine's scoring)."""
    group, start = sequences.shape[0], prompt["input_ids"].shape[1]
    with torch.no_grad():
        logits = engine(
            input_ids=sequences.to(device),
            mm_token_type_ids=modality(sequences).to(device),
            pixel_values=prompt["pixel_values"].repeat(group, 1).to(device, engine.dtype),
            image_grid_thw=prompt["image_grid_thw"].repeat(group, 1).to(device),
        ).logits.float()
    rows = torch.log_softmax(logits[:, start - 1 : -1], dim=-1)
    return rows.gather(2, sequences[:, start:].to(device).unsqueeze(2)).squeeze(2).cpu()


def items_of(prompts: list[dict[str, torch.Tensor]], rollouts: list[Any], vocab: int) -> list[dict[str, Any]]:
    """The worker's items: one per reply, its whole sequence trained on the reply's tokens, the engine's
    logprobs as the rollout's, its advantage the synthetic reward less its group's mean."""
    items: list[dict[str, Any]] = []
    for prompt, (sequences, logprobs) in zip(prompts, rollouts, strict=True):
        start = prompt["input_ids"].shape[1]
        rewards = (sequences[:, start:] < vocab // 2).float().mean(dim=1)
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for row, reply_logprobs, advantage in zip(sequences, logprobs, advantages, strict=True):
            mask = torch.zeros(row.numel(), dtype=torch.uint8)
            mask[start:] = 1
            rollout = torch.zeros(row.numel())
            rollout[start:] = reply_logprobs
            items.append(
                {
                    "tokens": row,
                    "pixel_values": prompt["pixel_values"],
                    "image_grid_thw": prompt["image_grid_thw"],
                    "rollout_logprobs": rollout,
                    "loss_mask": mask,
                    "advantage": float(advantage),
                    "episode": len(items),
                }
            )
    return items


def run(args: argparse.Namespace) -> dict[str, Any]:
    device, work = args.device, Path(tempfile.mkdtemp(prefix="megatron-gpu-probe-"))
    t = time.perf_counter()
    model_dir = make_model_dir(Path(args.files), work / "v0", args.seed, args.shape)
    prompts = prompt_inputs(model_dir, args.seed)
    dtype = getattr(torch, args.dtype)
    engine = load_engine(model_dir, device, dtype)
    vocab = engine.config.text_config.vocab_size
    trainer = Trainer(
        {"model_dir": str(model_dir), "device": device, "dtype": args.dtype, "lr": args.lr, "loss": {}}
    )
    report: dict[str, Any] = {
        "device": device_name(device),
        "dtype": args.dtype,
        "torch": torch.__version__,
        "steps": [],
    }
    report["parameters"] = sum(p.numel() for p in engine.parameters())
    report["setup_s"] = round(sync(device) - t, 2)
    for step in range(1, args.steps + 1):
        t0 = sync(device)
        rollouts = [sample(engine, p, args.group, args.tokens, device) for p in prompts]
        items = items_of(prompts, rollouts, vocab)
        t1 = sync(device)
        trained = torch.cat(
            [
                r[item["loss_mask"].bool()]
                for r, item in zip(
                    trainer.handle({"op": "logprobs", "items": items})["logprobs"], items, strict=True
                )
            ]
        )
        engine_lp = torch.cat([lp.flatten() for _, lp in rollouts])
        prefill = torch.cat(
            [
                prefill_logprobs(engine, p, s, device).flatten()
                for p, (s, _) in zip(prompts, rollouts, strict=True)
            ]
        )
        t2 = sync(device)
        stats = trainer.step(items, rewarded=True)
        t3 = sync(device)
        saved = trainer.save(str(work / f"v{step}"), processor=False)
        t4 = sync(device)
        engine = load_engine(Path(saved), device, dtype)
        t5 = sync(device)
        after = torch.cat(
            [
                prefill_logprobs(engine, p, s, device).flatten()
                for p, (s, _) in zip(prompts, rollouts, strict=True)
            ]
        )
        row = {
            "step": step,
            "logprob_gap": stats["stats"]["logprob_gap"],
            "gap_max": float((trained - engine_lp).abs().max()),
            "engine_prefill_gap": float((prefill - engine_lp).abs().mean()),
            "update_shift": float((after - prefill).abs().mean()),
            "grad_norm": stats["grad_norm"],
            "replies": len(items),
            "reply_tokens": int(engine_lp.numel()),
            "sample_s": round(t1 - t0, 3),
            "step_s": round(t3 - t2, 3),
            "export_s": round(t4 - t3, 3),
            "reload_s": round(t5 - t4, 3),
            "update_s": round(t5 - t3, 3),
        }
        report["steps"].append(row)
        print(
            " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
            flush=True,
        )
    shutil.rmtree(work, ignore_errors=True)
    return report


def device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == "cuda" else "cpu"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", help="the tiny model's files but its weights")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--shape", default="tiny", choices=("tiny", "mid"), help="the files' config, or MID_SHAPE"
    )
    parser.add_argument(
        "--dtype",
        default="bfloat16",
        choices=("bfloat16", "float32"),
        help="the engine's and the trainer's weights (float32: the control, where the gap is rounding only)",
    )
    parser.add_argument("--group", type=int, default=8, help="replies per prompt")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per reply")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-gap", type=float, default=0.02)
    parser.add_argument("--report", help="the report as JSON here too")
    args = parser.parse_args(argv)
    report = run(args)
    steps = report["steps"]
    gaps = [s["logprob_gap"] for s in steps]
    print(
        f"device: {report['device']}, {report['dtype']} (torch {report['torch']}); {report['parameters'] / 1e6:.0f}M parameters; set-up {report['setup_s']} s"
    )
    print(
        f"logprob gap trainer-engine: max {max(gaps):.3g} per step {', '.join(f'{g:.3g}' for g in gaps)}"
        f" (goal <= {args.max_gap}); worst token {max(s['gap_max'] for s in steps):.3g}"
    )
    print(f"engine's own decode-vs-prefill gap: {', '.join(f'{s["engine_prefill_gap"]:.3g}' for s in steps)}")
    for key in ("step_s", "update_s", "export_s", "reload_s", "sample_s"):
        print(f"{key}: {', '.join(str(s[key]) for s in steps)}")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2))
    moved = all(s["update_shift"] > 0 for s in steps)
    if not moved:
        print("FAILED: an update did not reach the engine (its logprobs did not move)")
    return 0 if moved and max(gaps) <= args.max_gap else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
