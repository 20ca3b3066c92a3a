"""Samples from the stream, two ways: built from the records as a live consumer receives them, and from a
replay of the topics to files. Both must be equal, and every sample must be exactly what the engine
consumed and produced for its leaf call (tokens, and pixel values rebuilt from the blob store)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio
import pytest

from consumers.trainer.episodes.sample_images import pixel_inputs
from consumers.trainer.episodes.samples import assemble
from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.codec import Delivery
from cua_stream.bus.consumer import EventConsumer
from cua_stream.bus.producer import EventProducer
from cua_stream.bus.reader import Bound
from cua_stream.config import BusConfig
from cua_stream.events import CallKind, CallRecord, decode
from cua_stream.replay import read_file, replay_to_file
from cua_stream.topics import SUMMARIES, TURNS
from tests.integration.gateway_servers import EngineProcess, GatewayProcess, engine, gateway, tiny_model_dir
from tests.integration.test_gateway_engine import SCREEN, TASK, computer1_call, content_of, run_turns
from tests.unit.gateway_support import screenshot_url, user_turn

__all__ = ["engine", "gateway", "tiny_model_dir"]  # fixtures

pytestmark = [pytest.mark.model, pytest.mark.kafka, pytest.mark.anyio]


async def episode_with_a_retry_and_a_compaction(gateway: GatewayProcess) -> None:
    sid = await gateway.session()
    url = gateway.base_url(sid)
    history = await run_turns(gateway, sid, 2)
    await computer1_call(url, history, "agent_turn")  # abandoned: the agent retried the same request
    after_retry = content_of(await computer1_call(url, history, "agent_turn"))
    history = [*history, after_retry, user_turn("", screenshot_url(9, SCREEN))]
    summary_prompt = user_turn("Summarize what was accomplished, the current state and the next steps.")
    summary = content_of(await computer1_call(url, [*history, summary_prompt], "compaction_summary"))
    reset = [
        user_turn(TASK),
        user_turn(f"Summary of previous work: {summary['content']}"),
        {"role": "assistant", "content": "Understood, continuing."},
        user_turn("Continue from the summary above.", screenshot_url(10, SCREEN)),
    ]
    await computer1_call(url, reset, "agent_turn")


async def live(config: BusConfig, count: int) -> list[CallRecord]:
    """The records as a consumer group receives them, in delivery order."""
    got: list[CallRecord] = []
    async with EventProducer(config) as dlq:
        consumer = EventConsumer(config, [TURNS, SUMMARIES], group_id="parity", dead_letters=dlq)
        async with consumer:

            async def take(d: Delivery) -> None:
                got.append(d.event)  # type: ignore[arg-type]

            with anyio.fail_after(60):
                await consumer.run(take, stop_after=count)
    return got


async def replayed(config: BusConfig, tmp: Path) -> list[CallRecord]:
    """The records read back from replay files of both topics."""
    out: list[CallRecord] = []
    for spec, name in ((TURNS, "turns.msgpack"), (SUMMARIES, "summaries.jsonl")):
        await replay_to_file(config, spec, Bound("beginning"), Bound("end"), tmp / name)
        out += [decode(r.value) for r in read_file(tmp / name) if r.value]  # type: ignore[misc]
    return out


async def test_live_and_replayed_records_build_the_same_samples_and_they_are_the_engines_io(
    engine: EngineProcess, gateway: GatewayProcess, bus_config: BusConfig, tmp_path: Path
) -> None:
    await episode_with_a_retry_and_a_compaction(gateway)
    from_replay = await replayed(bus_config, tmp_path)
    assert len(from_replay) == 6
    from_live = await live(bus_config, len(from_replay))
    a, b = assemble(from_live), assemble(from_replay[::-1])
    assert a == b and len(a.dropped_retries) == 1
    assert [s.kind for s in a.samples] == [CallKind.COMPACTION_SUMMARY, CallKind.AGENT_TURN]

    from transformers import AutoProcessor

    seen = await engine.recent()
    processor = AutoProcessor.from_pretrained(engine.model_dir)
    blobs = LocalBlobStore(gateway.blob_dir)
    for sample in a.samples:
        io_ = seen[sample.leaf_call_id]
        assert list(sample.tokens) == [*io_["input_ids"], *io_["output_ids"]]
        pixels, grid = pixel_inputs(sample.images, blobs, processor.image_processor)
        assert grid.tolist() == io_["image_grid_thw"]
        digest = hashlib.sha256(pixels.float().contiguous().numpy().tobytes()).hexdigest()
        assert digest == io_["pixel_values_sha256"]
    # each recorded completion is trained exactly once, except the abandoned retry's
    trained = sum(s.trained_tokens for s in a.samples)
    recorded = sum(len(r.completion_ids) for r in from_replay if r.call_id not in a.dropped_retries)
    assert trained == recorded
