"""The scripted environment: an episode without Harbor or a desktop, for tests of the other daemons, the
producer's benchmark and fast chaos runs. It talks to its gateway session exactly as computer-1 does
(LiteLLM chat completions, a fresh screenshot after every reply, the call-kind marker), so the turns on
the topic have the real token layout; the "desktop" is a picture drawn from the seed.

Its reward is a toy: the share of the episode's replies that ended with ``stop``. A reply cut at the
token cap ends the episode the way computer-1 ends one (``OutputLengthExceededError``, scored 0), and is
never continued.
"""

from __future__ import annotations

import base64
import io
import random
import time

import anyio

from cua_stream.events import CALL_KIND_FIELD, CallKind, Phase
from cua_stream.identity import outcome_of, trial_name
from producers.episode import EpisodeResult, EpisodeRun
from producers.outcome import exception_from


def screenshot(step: int, rng: random.Random, size: tuple[int, int] = (1280, 720)) -> bytes:
    """A 'web page' with a button somewhere: the scripted desktop's screenshot."""
    from PIL import Image, ImageDraw

    w, h = size
    img = Image.new("RGB", size, (245, 246, 250))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, w, 60), fill=(40, 60, 120))
    draw.text((20, 20), f"cua-stream scripted page - step {step}", fill=(255, 255, 255))
    x, y = rng.randrange(20, max(21, w - 180)), rng.randrange(80, max(81, h - 60))
    draw.rectangle((x, y, x + 160, y + 50), fill=(30, 140, 80))
    draw.text((x + 40, y + 18), "Submit", fill=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def image_part(png: bytes) -> dict:
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }


class ScriptedRunner:
    def __init__(
        self,
        *,
        model_name: str,
        max_turns: int,
        size: tuple[int, int] = (1280, 720),
        action_latency_s: float = 0.0,
        long_fraction: float = 0.0,
        long_factor: float = 1.0,
    ) -> None:
        self.model_name = model_name
        self.max_turns = max_turns
        self.size = size
        self.action_latency_s = action_latency_s
        """Time an 'action' takes on the scripted desktop (benchmarks inject it)."""
        self.long_fraction, self.long_factor = long_fraction, long_factor
        """The share of episodes whose actions take ``long_factor`` times as long (a long tail)."""

    def action_latency_for(self, seed: int, sample_index: int) -> float:
        """An episode's action latency: long for ``long_fraction`` of the episodes, drawn from its own seed
        (a generator apart from the episode's, so the screenshots and sampling seeds stay as they were)."""
        long = random.Random(f"long-tail:{seed}:{sample_index}").random() < self.long_fraction
        return self.action_latency_s * (self.long_factor if long else 1.0)

    async def run(self, episode: EpisodeRun) -> EpisodeResult:
        import litellm
        from harbor.llms.base import OutputLengthExceededError

        work = episode.work
        rng = random.Random(episode.seed * 1_000_003 + work.sample_index)
        temperature = float(work.sampling.get("temperature", 1.0))
        started = time.time()
        action_latency_s = self.action_latency_for(episode.seed, work.sample_index)
        messages: list[dict] = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Task: {work.task.name}"},
                    image_part(screenshot(0, rng, self.size)),
                ],
            }
        ]
        stops = turns = 0
        exception = None
        for step in range(1, self.max_turns + 1):
            reply = await litellm.acompletion(
                model=f"openai/{self.model_name}",
                api_base=episode.session_url,
                api_key=episode.session_key.reveal(),
                messages=messages,
                temperature=temperature,
                seed=rng.randrange(2**31),
                **{CALL_KIND_FIELD: CallKind.AGENT_TURN.value},
            )
            choice = reply.choices[0]
            turns += 1
            if choice.finish_reason == "length":  # computer-1 ends the episode here
                cut = OutputLengthExceededError(
                    "the reply hit the session's max_new_tokens", choice.message.content
                )
                exception = exception_from(cut, Phase.AGENT)
                break
            stops += choice.finish_reason == "stop"
            await anyio.sleep(action_latency_s)
            messages.append({"role": "assistant", "content": choice.message.content or ""})
            messages.append({"role": "user", "content": [image_part(screenshot(step, rng, self.size))]})
        outcome = outcome_of(
            work,
            episode.attempt,
            agent_started=True,
            exception=exception,
            rewards=None if exception else {"reward": stops / max(turns, 1)},
            early_termination_reason=None if exception else "max_turns_reached",
            trial_name=trial_name(work, episode.attempt),
            started_at=started,
            finished_at=time.time(),
        )
        return EpisodeResult(outcome)
