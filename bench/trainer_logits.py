"""Trainer logprobs: projecting only the trained positions on the vocabulary against projecting every
position (what the torch backend did before), on the same screenshot episode, side by side in one run
(rounds alternate, medians compared).

    .venv/bin/python bench/trainer_logits.py [--turns 3] [--rounds 5]

The sample is an episode as the gateway records it: ``--turns`` calls, each a screenshot (800x600, as the
local desktop takes them) and a ~60-token computer-1 reply; only the replies train (~10 % of the tokens).
Each round times a forward + backward of the sample's GRPO-style loss, and reads the largest resident
size the process reached. Both paths must give the same trained logprobs (checked).
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
from PIL import Image

from consumers.trainer.backends.torch_backend import TorchBackend
from consumers.trainer.episodes.samples import assemble
from cua_stream.blobs import LocalBlobStore
from cua_stream.engine.forward import prompt_position_ids, token_logprobs
from cua_stream.events import CallKind, Logprobs, TokenIds, TurnEvent
from cua_stream.gateway.messages import parse_messages
from cua_stream.gateway.rendering import Renderer
from cua_stream.models.tiny import make_tiny_model

REPLY = '{"analysis": "scripted policy", "plan": "click", "action": {"type": "click", "x": 512, "y": 300}}'


def screenshot(i: int) -> str:
    import base64

    img = Image.new("RGB", (800, 600), (240, 240, 240))
    img.paste((200, 40 + 30 * i, 40), (100 + 40 * i, 200, 260 + 40 * i, 250))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def episode(model_dir: Path, blobs: LocalBlobStore, turns: int) -> TurnEvent:
    """One sample of ``turns`` calls, recorded as a single root call (the same tokens as the chain)."""
    renderer = Renderer.from_pretrained(str(model_dir))
    messages: list[dict] = []
    for i in range(turns):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": "Click the button."},
                                         {"type": "image_url", "image_url": {"url": screenshot(i)}}]}
        )  # fmt: skip
        if i < turns - 1:
            messages.append({"role": "assistant", "content": REPLY})
    delta = renderer.render_delta(parse_messages(messages), after_completion=None)
    refs = []
    for image in delta.images:
        data, ref = image.stored()
        blobs.put(data)
        refs.append(ref)
    reply = [*renderer.encode(REPLY), renderer.im_end_id]
    return TurnEvent(
        run_id="b", group_id="g", episode_id="e", seq=0, call_id="c", kind=CallKind.AGENT_TURN,
        prompt_ids=TokenIds(delta.ids), completion_ids=TokenIds(reply), completion_logprobs=Logprobs([-1.0] * len(reply)),
        images=tuple(refs), policy_version=0, finish_reason="stop", started_at=0.0,
    )  # fmt: skip


def full_logits(backend: TorchBackend, sample: object) -> torch.Tensor:
    """The former path: every position projected on the vocabulary, then the trained ones picked."""
    from consumers.trainer.episodes.sample_images import pixel_inputs

    ids = torch.tensor([list(sample.tokens)], dtype=torch.long)  # type: ignore[attr-defined]
    pixel_values, grid = pixel_inputs(sample.images, backend.blobs, backend.processor.image_processor)  # type: ignore[attr-defined]
    positions, _ = prompt_position_ids(backend.model, ids, grid)
    extra = {"pixel_values": pixel_values, "image_grid_thw": grid,
             "mm_token_type_ids": (ids == backend.image_token_id).int()}  # fmt: skip
    logits = backend.model(input_ids=ids, position_ids=positions, use_cache=False, **extra).logits
    logp = token_logprobs(logits[0, :-1], backend.temperature)
    picked = logp.gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)
    return torch.cat([picked.new_zeros(1), picked])


def timed(
    fn: object, backend: TorchBackend, sample: object, mask: torch.Tensor
) -> tuple[float, torch.Tensor]:
    backend.model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    logp = fn(sample)  # type: ignore[operator]
    (-(logp * mask).sum() / mask.sum()).backward()
    return time.perf_counter() - started, logp.detach()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(Path(tmp) / "model")
        blobs = LocalBlobStore(Path(tmp) / "blobs")
        (sample,) = assemble([episode(model_dir, blobs, args.turns)]).samples
        backend = TorchBackend(model_dir, blobs)
        mask = torch.frombuffer(bytearray(sample.loss_mask), dtype=torch.uint8).float()
        print(f"sample: {len(sample.tokens)} tokens, {int(mask.sum())} trained, {len(sample.images)} images")
        times: dict[str, list[float]] = {"all positions": [], "trained positions": []}
        rss: dict[str, int] = {}
        ways = {
            "all positions": lambda s: full_logits(backend, s),
            "trained positions": backend.token_logprobs,
        }
        for name in ("trained positions", "all positions"):  # peak RSS only grows: the lean path first
            timed(ways[name], backend, sample, mask)  # warm-up
            rss[name] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        values = {}
        for _ in range(args.rounds):
            for name, fn in ways.items():
                seconds, values[name] = timed(fn, backend, sample, mask)
                times[name].append(seconds)
        trained = mask.bool()
        gap = float((values["all positions"][trained] - values["trained positions"][trained]).abs().max())
        assert gap < 1e-4, f"the two paths disagree by {gap}"
        base, lean = (statistics.median(times[k]) for k in ("all positions", "trained positions"))
        print(f"{'path':<20}{'median s':>10}{'peak RSS MB (after warm-up)':>30}")
        for name in ways:
            print(f"{name:<20}{statistics.median(times[name]):>10.3f}{rss[name]:>30}")
        print(
            f"speed-up: {base / lean:.1f}x (forward + backward of one sample); max logprob difference {gap:.1e}"
        )


if __name__ == "__main__":
    main()
