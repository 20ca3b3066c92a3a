"""Gateway overhead per turn, incremental (TITO) versus a full re-render, measured side by side.

    .venv/bin/python bench/gateway_overhead.py [--turns 1 10 20] [--reps 15] [--screen 1280x720]

For each conversation length N it replays N-1 computer-1 turns (screenshot per turn, JSON actions as
replies) through a real ``Gateway`` (real tokenizer, processor arithmetic, blob store on disk), then
times turn N. The engine is a stand-in that builds the /generate body as EngineClient does and then
waits ``--engine-ms``; that wait is subtracted. The sink msgpack-encodes each record as the Kafka
producer does. What is timed is the latency the gateway adds to a turn: body decode, parent match,
rendering, engine-request encoding, record; blob writes overlap the generation, as in production.

Columns (medians, milliseconds):
  body KB      request body size (all screenshots of the history travel in every request)
  json         decoding the whole body (screenshots stay undecoded JSON literals). Since the request-prefix
               reuse, ``turn`` decodes only what follows the messages of the session's previous request
               (compared byte for byte first), so this is the cost it avoids, not a part of it
  turn         the whole chat call, incremental: the latency the gateway adds to a turn
  prepare      parent match + rendering of the new messages (the TITO step; part of ``turn``)
  rerender     the same conversation rendered from scratch with the same code (template, tokenizer,
               every image's header read): the cheapest possible full re-render
  processor    apply_chat_template + processor(text, images): a re-render with pixel processing, what
               an OpenAI-compatible server does on every call
  p/r          prepare / rerender
  turn/re-turn turn divided by the same turn with ``rerender`` in place of ``prepare``
Goal: turn <= 2 ms and <= 1/10 of a re-render.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import io
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
from PIL import Image, ImageDraw

from cua_stream.blobs import LocalBlobStore
from cua_stream.events import Event, VersionSpan, encode
from cua_stream.gateway.chat_request import decode_body, parse_chat_request
from cua_stream.gateway.engine_client import EngineReply, generate_body
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.service import Gateway
from cua_stream.gateway.session import SessionSpec
from cua_stream.topics import TopicSpec


class EncodingSink:
    """Encodes each record as the producer would, then drops it (Kafka I/O is not gateway overhead)."""

    async def publish(self, spec: TopicSpec, event: Event) -> None:
        encode(event)


class StandInEngine:
    """Builds the /generate body as EngineClient does, then "generates" for ``delay_s`` (so work the
    gateway overlaps with generation, like blob writes, is hidden as it is in production) and replies
    with a JSON action. The time spent inside ``generate`` is recorded and subtracted."""

    def __init__(self, renderer: Renderer, delay_s: float) -> None:
        self.renderer = renderer
        self.delay_s = delay_s
        self.n = 0
        self.last_wait = 0.0

    async def generate(
        self, input_ids: list[int], image_data: Any, sampling_params: dict[str, Any], **kw: Any
    ) -> EngineReply:
        generate_body(input_ids, image_data, sampling_params, **kw)  # gateway work, counted
        started = time.perf_counter()  # from here on it is the engine's time
        self.n += 1
        text = (
            f'{{"analysis": "step {self.n}", "action": {{"type": "click", "x": {self.n % 640}, "y": 200}}}}'
        )
        ids = [*self.renderer.encode(text), self.renderer.im_end_id]
        await asyncio.sleep(self.delay_s)
        self.last_wait = time.perf_counter() - started
        return EngineReply(
            text=text,
            output_ids=ids,
            logprobs=[-0.5] * len(ids),
            finish_reason="stop",
            abort_status=None,
            abort_message="",
            weight_versions=(VersionSpan(version=0, start=0, end=len(ids)),),
            prompt_tokens=len(input_ids),
            engine_ms=0.0,
            meta_info={},
        )


def screenshot(i: int, size: tuple[int, int]) -> str:
    """A busy synthetic desktop (windows, text, a noisy photo region) encoded as computer-1 does."""
    rng = random.Random(i)
    img = Image.new("RGB", size, (40, 60, 90))
    draw = ImageDraw.Draw(img)
    for k in range(12):
        x, y = rng.randrange(size[0] - 200), rng.randrange(size[1] - 120)
        draw.rectangle([x, y, x + 200, y + 120], fill=(rng.randrange(256), rng.randrange(256), 230))
        for line in range(6):
            draw.text((x + 6, y + 6 + 16 * line), f"window {k} line {line} step {i}", fill=(0, 0, 0))
    noise = Image.effect_noise((size[0] // 4, size[1] // 4), 40 + i % 20).convert("RGB")
    img.paste(noise, (size[0] // 2, size[1] // 2))
    buf = io.BytesIO()
    img.save(buf, "WEBP", quality=80)
    return "data:image/webp;base64," + base64.b64encode(buf.getvalue()).decode()


def user(text: str, url: str | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if url:
        content.append({"type": "image_url", "image_url": {"url": url, "detail": "auto"}})
    return {"role": "user", "content": content}


def body(messages: list[dict[str, Any]]) -> bytes:
    request = {
        "model": "policy",
        "messages": messages,
        "temperature": 1.0,
        "cua_call_kind": "agent_turn",
        "prompt_cache_key": "computer-1-bench",
        "max_tokens": 512,
    }
    return msgspec.json.encode(request)


async def measure(
    gateway: Gateway,
    engine: StandInEngine,
    processor: Any,
    shots: list[str],
    n_turns: int,
    reps: int,
    size: tuple[int, int],
) -> dict[str, float]:
    task = "You are operating a computer. " * 40 + "Task: open the settings page and enable dark mode."
    samples: dict[str, list[float]] = {k: [] for k in ("json", "turn", "prepare", "rerender", "processor")}
    size_kb = 0.0
    for rep in range(reps):
        spec = SessionSpec(
            run_id="b", group_id="g", episode_id=f"e{n_turns}-{rep}", sampling={"temperature": 1.0}
        )
        session = gateway.create_session(spec)
        # the screenshot of the timed turn is new (as in an episode): it is decoded, hashed and stored
        fresh = screenshot(100_000 + 100 * n_turns + rep, size)
        messages = [user(task, fresh if n_turns == 1 else shots[0])]
        for i in range(1, n_turns):  # the history, untimed
            reply = await gateway.chat(session.session_id, body(messages))
            assert reply.status == 200, reply.body
            content = reply.body["choices"][0]["message"]["content"]
            last = i == n_turns - 1
            messages += [{"role": "assistant", "content": content}, user("", fresh if last else shots[i])]
        raw = body(messages)
        size_kb = len(raw) / 1024
        gc.collect()
        t = time.perf_counter()
        reply = await gateway.chat(session.session_id, raw)
        samples["turn"].append(time.perf_counter() - t - engine.last_wait)
        assert reply.status == 200, reply.body
        # the same request again through the rendering paths alone (it matches the same parent)
        t = time.perf_counter()
        decode_body(raw)
        samples["json"].append(time.perf_counter() - t)
        call = parse_chat_request(raw, session)

        # Alternated: whichever runs first after the turn runs on colder caches (~0.1-0.2 ms slower).
        for name in ("prepare", "rerender") if rep % 2 else ("rerender", "prepare"):
            t = time.perf_counter()
            if name == "prepare":
                gateway.prepare(session, call)
            else:
                gateway.renderer.render_full(call.messages, add_generation_prompt=True)
            samples[name].append(time.perf_counter() - t)
        if rep < 3:  # slow; a few samples suffice
            hf_messages = [m.for_template() for m in call.messages]
            images = [Image.open(io.BytesIO(p.data())) for m in call.messages for p in m.images()]
            t = time.perf_counter()
            text = processor.apply_chat_template(hf_messages, tokenize=False, add_generation_prompt=True)
            processor(text=[text], images=images, return_tensors="pt")
            samples["processor"].append(time.perf_counter() - t)
        gateway.sessions.pop(session.session_id)
    out = {k: statistics.median(v) * 1e3 for k, v in samples.items() if v}
    out["kb"] = size_kb
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 10, 20])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--screen", default="1280x720")
    parser.add_argument("--engine-ms", type=float, default=20.0, help="stand-in generation time")
    args = parser.parse_args()
    width, height = (int(v) for v in args.screen.split("x"))

    from cua_stream.models.tiny import build_processor, build_tokenizer

    processor = build_processor(build_tokenizer())
    renderer = Renderer(processor.tokenizer, processor.image_processor)
    shots = [screenshot(i, (width, height)) for i in range(max(args.turns) + 1)]
    with tempfile.TemporaryDirectory() as blob_dir:
        engine = StandInEngine(renderer, args.engine_ms / 1e3)
        gateway = Gateway(
            renderer=renderer,
            engine=engine,
            sink=EncodingSink(),
            blobs=LocalBlobStore(blob_dir),
        )
        await measure(gateway, engine, processor, shots, 2, 3, (width, height))  # warm-up
        kb = statistics.mean(len(s) * 3 / 4 / 1024 for s in shots)
        print(f"screenshots {width}x{height} webp, {kb:.0f} KB each; medians of {args.reps} reps, ms")
        print(f"{'turns':>5} {'body KB':>8} {'json':>6} {'turn':>6} {'prepare':>8} {'rerender':>9}"
              f" {'processor':>10} {'p/r':>6} {'turn/re-turn':>13}")  # fmt: skip
        for n in args.turns:
            m = await measure(gateway, engine, processor, shots, n, args.reps, (width, height))
            re_turn = m["turn"] - m["prepare"] + m["rerender"]
            print(f"{n:>5} {m['kb']:>8.0f} {m['json']:>6.2f} {m['turn']:>6.2f} {m['prepare']:>8.2f}"
                  f" {m['rerender']:>9.2f} {m['processor']:>10.1f} {m['prepare'] / m['rerender']:>6.2f}"
                  f" {m['turn'] / re_turn:>13.3f}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
