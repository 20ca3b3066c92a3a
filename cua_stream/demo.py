"""The embedded local demo: every daemon that exists so far, wired through a real local Kafka broker.

What runs: the local broker; the CPU reference engine over a tiny random Qwen3-VL and the session
gateway in front of it (both as ``cua-stream`` child processes); the exactly-once scorer (in process);
and a tap that prints every event. Episodes are driven the way computer-1 talks to its model — litellm
chat completions to the session URL, with a fresh screenshot after every action — but without a desktop
or Harbor trial yet (the rollout producer replaces this driver). One episode per run loses its
"sandbox" before its last turn, so the scorer's reason-coded discard shows up next to the rewards.

The toy verifier rewards an episode by the share of its replies that ended with ``stop``; random weights
make that a coin flip, which is all a demo needs. A reply cut at the token cap ends its episode the way
computer-1 ends one (``OutputLengthExceededError``, which the scorer scores 0): a truncated reply is
never continued. Outcome exceptions are recorded by ``producers.outcome``, as for a Harbor trial.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import httpx
from anyio.abc import TaskStatus

from cua_stream.config import BusConfig, cache_dir
from cua_stream.events import CALL_KIND_FIELD, CallKind, OutcomeEvent, Phase, WorkRequest

MODEL_DIR_NAME = "tiny-qwen3-vl-v1"
SERVED_NAME = "tiny-qwen3-vl"
TEMPERATURE = 1.0


@dataclass(frozen=True)
class DemoPlan:
    groups: int = 2
    group_size: int = 3
    turns: int = 3
    max_new_tokens: int = 3
    """Most of the tiny model's replies to a screenshot end with ``stop`` within 3 tokens; the odd one
    hits the cap, which ends its episode with reward 0 (``token_cap``), so a group's rewards differ."""


def tiny_model_dir() -> Path:
    """The demo's model, built once (offline, a few seconds) into the user cache."""
    path = cache_dir() / "models" / MODEL_DIR_NAME
    if not (path / "config.json").exists():
        from cua_stream.models.tiny import make_tiny_model

        make_tiny_model(path)
    return path


def screenshot(step: int, rng: random.Random) -> bytes:
    """A 1280x720 'web page' with a button somewhere: a stand-in for the desktop's screenshot."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (1280, 720), (245, 246, 250))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, 1280, 60), fill=(40, 60, 120))
    draw.text((20, 20), f"cua-stream demo page - step {step}", fill=(255, 255, 255))
    x, y = rng.randrange(100, 1100), rng.randrange(120, 640)
    draw.rectangle((x, y, x + 160, y + 50), fill=(30, 140, 80))
    draw.text((x + 40, y + 18), "Submit", fill=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _image_part(png: bytes) -> dict:
    import base64

    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }


@dataclass(frozen=True)
class Episode:
    run_id: str
    group_id: str
    episode_id: str
    task: str
    lose_sandbox_after: int | None = None
    seed: int = 0
    """Seeds the episode's screenshots and each reply's sampling: a demo run replays exactly (the
    episode that loses its sandbox always gets that far)."""
    policy_version: int = 0
    """The policy version the episode's work was issued under."""


async def run_episode(gateway_url: str, ep: Episode, plan: DemoPlan) -> OutcomeEvent:
    """Drive one episode through the gateway the way computer-1 does, then build its outcome."""
    import litellm
    from harbor.agents.computer_1.runtime import RuntimeRequestError
    from harbor.llms.base import OutputLengthExceededError

    from producers.outcome import exception_from

    rng = random.Random(ep.seed)
    started = time.time()
    async with httpx.AsyncClient(timeout=120) as http:
        created = await http.post(
            f"{gateway_url}/sessions",
            json={
                "run_id": ep.run_id,
                "group_id": ep.group_id,
                "episode_id": ep.episode_id,
                "sampling": {"temperature": TEMPERATURE, "max_new_tokens": plan.max_new_tokens},
            },
        )
        created.raise_for_status()
        session_id = created.json()["session_id"]
        base_url = f"{gateway_url}/sessions/{session_id}/v1"
        messages: list[dict] = [
            {
                "role": "user",
                "content": [{"type": "text", "text": f"Task: {ep.task}"}, _image_part(screenshot(0, rng))],
            }
        ]
        stops = turns = 0
        exception = None
        for step in range(1, plan.turns + 1):
            if ep.lose_sandbox_after is not None and step > ep.lose_sandbox_after:
                lost = RuntimeRequestError("screenshot", 500, "the sandbox is gone (demo: simulated)")
                exception = exception_from(lost, Phase.AGENT)
                break
            reply = await litellm.acompletion(
                model=f"openai/{SERVED_NAME}",
                api_base=base_url,
                api_key="demo",
                messages=messages,
                temperature=TEMPERATURE,
                seed=ep.seed * 100 + step,
                **{CALL_KIND_FIELD: CallKind.AGENT_TURN.value},
            )
            choice = reply.choices[0]
            turns += 1
            if choice.finish_reason == "length":  # computer-1 ends the episode here
                cut = OutputLengthExceededError(
                    f"the reply hit max_new_tokens={plan.max_new_tokens}", choice.message.content
                )
                exception = exception_from(cut, Phase.AGENT)
                break
            stops += choice.finish_reason == "stop"
            messages.append({"role": "assistant", "content": choice.message.content or ""})
            messages.append({"role": "user", "content": [_image_part(screenshot(step, rng))]})
        report = (await http.delete(f"{gateway_url}/sessions/{session_id}")).json()
    return OutcomeEvent(
        run_id=ep.run_id,
        group_id=ep.group_id,
        episode_id=ep.episode_id,
        task=ep.task,
        policy_version=ep.policy_version,
        agent_started=True,
        exception=exception,
        rewards=None if exception else {"reward": stops / max(turns, 1)},
        early_termination_reason=None if exception else "max_turns_reached",
        n_calls=report["n_calls"],
        n_turns=report["n_turns"],
        gateway_statuses=tuple(report["statuses"]),
        trial_name=f"{ep.task}__{ep.episode_id}",
        started_at=started,
        finished_at=time.time(),
    )


def episodes(run_id: str, plan: DemoPlan) -> list[Episode]:
    tasks = ["click-the-submit-button", "open-the-settings-page", "fill-in-the-search-box"]
    out = []
    for g in range(plan.groups):
        for i in range(plan.group_size):
            # the first group's last episode loses its sandbox before its final turn
            lose = max(1, plan.turns - 1) if (g, i) == (0, plan.group_size - 1) else None
            out.append(
                Episode(
                    run_id,
                    f"{run_id}-g{g}",
                    f"{run_id}-g{g}-e{i}",
                    tasks[g % len(tasks)],
                    lose,
                    seed=g * 1000 + i,
                )
            )
    return out


async def drive(
    bus: BusConfig, gateway_url: str, plan: DemoPlan, say: Callable[[str], None]
) -> list[OutcomeEvent]:
    """Run the episodes (one group at a time, its episodes concurrently) and publish their outcomes."""
    from cua_stream.bus.producer import EventProducer
    from cua_stream.topics import OUTCOMES

    run_id = f"demo-{time.strftime('%H%M%S')}"
    outcomes: list[OutcomeEvent] = []
    async with EventProducer(bus) as producer:
        plan_eps = episodes(run_id, plan)
        for g in range(plan.groups):
            group = [e for e in plan_eps if e.group_id == f"{run_id}-g{g}"]
            results: list[OutcomeEvent] = []

            async def one(ep: Episode, results: list[OutcomeEvent] = results) -> None:
                outcome = await run_episode(gateway_url, ep, plan)
                await producer.publish(OUTCOMES, outcome)
                results.append(outcome)

            async with anyio.create_task_group() as tg:
                for ep in group:
                    tg.start_soon(one, ep)
            outcomes.extend(results)
            say(f"group {g + 1}/{plan.groups} done: {len(results)} episodes")
    return outcomes


async def drive_work(
    bus: BusConfig,
    gateway_url: str,
    plan: DemoPlan,
    *,
    concurrency: int = 4,
    group: str = "demo-driver",
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The demo's stand-in for the rollout producer until it lands: consume work requests (a consumer
    group), play each episode through the gateway like ``run_episode``, publish its outcome, and commit
    the work request after that. Runs until cancelled."""
    import zlib

    from cua_stream.bus.consumer import EventConsumer
    from cua_stream.bus.producer import EventProducer
    from cua_stream.topics import OUTCOMES, WORK

    limiter = anyio.CapacityLimiter(concurrency)
    async with EventProducer(bus) as producer:
        consumer = EventConsumer(bus, [WORK], group_id=f"{bus.topic_prefix}.{group}", dead_letters=producer)
        async with consumer:
            task_status.started()

            async def one(work: WorkRequest) -> None:
                async with limiter:
                    episode = Episode(
                        work.run_id,
                        work.group_id,
                        work.episode_id,
                        work.task.name,
                        seed=zlib.crc32(work.episode_id.encode()),
                        policy_version=work.policy_version,
                    )
                    cap = int(work.sampling.get("max_new_tokens", plan.max_new_tokens))
                    outcome = await run_episode(gateway_url, episode, replace(plan, max_new_tokens=cap))
                    await producer.publish(OUTCOMES, outcome)

            async for batch in consumer.batches():
                async with anyio.create_task_group() as tg:
                    for delivery in batch:
                        assert isinstance(delivery.event, WorkRequest)
                        tg.start_soon(one, delivery.event)
                for delivery in batch:
                    consumer.processed(delivery)
                await consumer.commit()
