"""`cua-stream inspect` against a real step: the trainer (tiny model, real broker) trains one step on
episodes with a retry and a compaction, recording the items its backend trained; `inspect step`, from
the topics alone, rebuilds exactly those samples with their advantages and says they match the step's
record; `inspect episode` shows the tree and the step. A wrong max_seq_len is a loud mismatch (exit 1),
an unknown step a one-line error (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from consumers.trainer.backends.torch_backend import TrainItem
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import scan
from cua_stream.cli.inspect import app
from cua_stream.config import BusConfig
from cua_stream.events import (
    CallKind,
    CallRecord,
    Logprobs,
    Reward,
    ScoreEvent,
    SummaryEvent,
    TokenIds,
    TrainStep,
    TurnEvent,
)
from cua_stream.topics import SCORES, SUMMARIES, TRAIN_STEPS, TURNS
from tests.integration.gateway_servers import tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]

RUN = "inspect-run"


def episode(group: int, index: int) -> list[CallRecord | ScoreEvent]:
    """Two turns and a score; episode 0 of group 0 also retries its second turn, compacts, and goes on
    from a new root."""
    ids = {"run_id": RUN, "group_id": f"{RUN}-g{group:06d}", "episode_id": f"{RUN}-g{group:06d}-e{index}"}
    shapes = [(None, 6, 4), (0, 3, 4)]  # (parent seq, prompt tokens, completion tokens)
    if (group, index) == (0, 0):
        shapes += [(0, 3, 5), (2, 2, 3), (None, 5, 2)]  # c2 retries c1; c3 summarises; c4: new root
    out: list[CallRecord | ScoreEvent] = []
    for seq, (parent, n_prompt, n_completion) in enumerate(shapes):
        base = 100 + 37 * group + 11 * index
        prompt = [base + (seq if seq != 2 else 1) * 7 + k for k in range(n_prompt)]  # c2 sends c1's prompt
        summary = seq == 3
        out.append(
            (SummaryEvent if summary else TurnEvent)(
                **ids,
                seq=seq,
                call_id=f"{ids['episode_id']}-c{seq}",
                parent_call_id=None if parent is None else f"{ids['episode_id']}-c{parent}",
                kind=CallKind.COMPACTION_SUMMARY if summary else CallKind.AGENT_TURN,
                prompt_ids=TokenIds(prompt),
                completion_ids=TokenIds(range(900 + seq * 10, 900 + seq * 10 + n_completion)),
                completion_logprobs=Logprobs([-1.0 - 0.1 * k for k in range(n_completion)]),
                policy_version=0,
                finish_reason="stop",
                started_at=0.0,
            )
        )
    out.append(ScoreEvent(**ids, verdict=Reward(value=float(index == 0)), policy_version=0, scored_at=0.0))
    return out


async def publish(config: BusConfig) -> None:
    async with EventProducer(config) as producer:
        for group in range(2):
            for index in range(2):
                for event in episode(group, index):
                    topic = SCORES if isinstance(event, ScoreEvent) else TURNS
                    await producer.send(SUMMARIES if isinstance(event, SummaryEvent) else topic, event)
        await producer.flush()


class RecordingTrainer(Trainer):
    """The real trainer, keeping the items its backend was given, step by step."""

    trained: list[list[TrainItem]]

    def _load(self) -> Any:
        saved, backend = super()._load()
        step, self.trained = backend.step, []

        def recording(items: list[TrainItem]) -> Any:
            self.trained.append(list(items))
            return step(items)

        backend.step = recording  # type: ignore[method-assign]
        return saved, backend


async def train_one_step(bus: BusConfig, model: Path, home: Path) -> tuple[TrainStep, list[TrainItem]]:
    await publish(bus)
    config = TrainerConfig(
        run_id=RUN, model_path=str(model), group_size=2, groups_per_step=2, max_staleness=1000,
        max_steps=1, checkpoint_dir=str(home / "ckpt"), blob_dir=str(home / "blobs"), bus=bus,
    )  # fmt: skip
    trainer = RecordingTrainer(config)
    with anyio.fail_after(240):
        await trainer.run()
    (step,) = [d.event async for d in scan(bus, TRAIN_STEPS) if isinstance(d.event, TrainStep)]
    (items,) = trainer.trained
    return step, items


def rebuilt_items(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What `inspect step --json` says each trained sample was, in the step's order."""
    return [
        (
            e["episode_id"],
            s["leaf_call_id"],
            s["tokens"],
            s["loss_mask"],
            s["rollout_logprobs"],
            s["images"],
            e["advantage"],
        )
        for g in document["groups"]
        for e in g["episodes"]
        if e["advantage"] is not None
        for s in e["samples"]
    ]


def trained_items(items: list[TrainItem]) -> list[tuple[Any, ...]]:
    """The same of the items the trainer's backend was given."""
    return [
        (
            i.sample.episode_id,
            i.sample.leaf_call_id,
            i.sample.tokens.tolist(),
            list(i.sample.loss_mask),
            i.sample.rollout_logprobs.tolist(),
            [ref.sha256 for ref in i.sample.images],
            i.advantage,
        )
        for i in items
    ]


def test_inspect_rebuilds_the_step_the_trainer_trained(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    step, trained = anyio.run(train_one_step, bus_config, tiny_model_dir, tmp_path)
    where = ["--bootstrap", bus_config.bootstrap_servers, "--prefix", bus_config.topic_prefix]
    runner = CliRunner()

    done = runner.invoke(app, ["step", "--run", RUN, "--step", str(step.step), "--json", *where])
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert document["matches"] and document["mismatches"] == []
    assert document["rebuilt"]["group_ids"] == list(step.group_ids)
    assert document["rebuilt"]["n_episodes"] == step.n_episodes == 4
    assert document["rebuilt"]["n_samples"] == step.n_samples == 5  # e0 of g0: its compaction, its new root
    assert document["rebuilt"]["trained_tokens"] == step.metrics["trained_tokens"]
    assert rebuilt_items(document) == trained_items(trained)  # the very samples the backend trained

    # the real entry point, as text, with the model's tokenizer
    command = [sys.executable, "-m", "cua_stream", "inspect", "step", "--run", RUN, "--step", str(step.step)]
    text = subprocess.run(
        [*command, "--model", str(tiny_model_dir), *where], capture_output=True, text=True, timeout=120,
        env=os.environ.copy(),
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert f"OK: the rebuilt batch is the one step {step.step} trained" in text.stdout
    assert "[TRAINED" in text.stdout and "versions v0×" in text.stdout
    print(text.stdout)  # shown with -s: what a person sees

    leaf = f"{RUN}-g000000-e0"
    done = runner.invoke(app, ["episode", leaf, "--run", RUN, "--json", *where])
    assert done.exit_code == 0, done.output
    tree = json.loads(done.stdout)
    assert tree["trained_in_step"] == step.step
    ((attempt),) = tree["attempts"]
    calls = {c["seq"]: c for c in attempt["calls"]}
    assert calls[2]["retry_of"] == f"{leaf}-c1" and calls[1]["abandoned"]
    assert calls[3]["kind"] == "compaction_summary" and calls[0]["trained_in_sample"] == f"{leaf}-c3"
    assert calls[4]["trained_in_sample"] == f"{leaf}-c4"

    # a max_seq_len the trainer did not have cuts the compaction's sample: a loud mismatch
    done = runner.invoke(app, ["step", "--run", RUN, "--step", str(step.step), "--max-seq-len", "12", *where])
    assert done.exit_code == 1 and "MISMATCH" in done.output, done.output

    done = runner.invoke(app, ["step", "--run", RUN, "--step", "99", *where])
    assert done.exit_code == 2 and "has no step 99" in done.output, done.output
