"""The simulated engine (a benchmark fixture, ``bench/fixtures``): its latency model's step costs match
hand-computed values and grow with the batch; the continuous batch prefills first, in chunks, up to its
batch cap; the prefix cache spares an extended prompt; and its replies parse with the gateway's own
parser (the same protocol as SGLang's ``/generate``)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bench.fixtures.latency_model import ContinuousBatch, Job, LatencyModel, uncached_tokens
from bench.fixtures.sim_engine import GenerateBody, SimEngine
from cua_stream.gateway.engine_client import parse_generate_response


def test_the_step_costs_are_the_stated_lines() -> None:
    model = LatencyModel()  # the cited 8B-on-H100 figures
    assert model.prefill_ms(1000) == pytest.approx(4.5 + 0.032 * 1000)  # 36.5 ms
    assert model.decode_ms(1) == pytest.approx(4.54)
    assert model.decode_ms(200) == pytest.approx(12.5)  # NIM's 12.65 ms at concurrency 200
    assert model.decode_ms(256) == pytest.approx(14.74)


def test_the_step_costs_grow_with_the_batch_and_the_tokens() -> None:
    model = LatencyModel()
    decode = [model.decode_ms(b) for b in range(1, 300)]
    prefill = [model.prefill_ms(t) for t in range(0, 9000, 97)]
    assert all(a < b for a, b in itertools.pairwise(decode))
    assert all(a < b for a, b in itertools.pairwise(prefill))


@pytest.mark.parametrize(
    ("prompt", "cached", "new"),
    [(1000, 0, 1000), (1000, 800, 200), (1000, 1000, 1), (500, 800, 500), (0, 0, 1)],
)
def test_only_what_extends_the_cached_prefix_is_prefilled(prompt: int, cached: int, new: int) -> None:
    assert uncached_tokens(prompt, cached) == new


def test_prefill_goes_first_in_chunks_up_to_the_batch_cap() -> None:
    model = LatencyModel(
        prefill_step_ms=1.0, prefill_ms_per_token=0.01, decode_step_ms=2.0, decode_ms_per_request=0.5,
        max_batch=2, prefill_chunk_tokens=100,
    )  # fmt: skip
    batch = ContinuousBatch(model)
    a, b, c = Job(prefill=150, decode=2), Job(prefill=30, decode=1), Job(prefill=10, decode=3)
    for job in (a, b, c):
        batch.add(job)
    steps = []
    while (step := batch.step()) is not None:
        steps.append((step.kind, round(step.ms, 6), step.work, step.sampled, step.finished))
    assert steps == [
        ("prefill", 2.0, 100, 0, ()),  # a's first chunk
        ("prefill", 1.8, 80, 2, (b,)),  # a's rest and b (one token, done); the batch is full
        ("prefill", 1.1, 10, 1, ()),  # b left a slot: c joins
        ("decode", 3.0, 2, 2, (a,)),
        ("decode", 2.5, 1, 1, (c,)),
    ]
    assert sum(s[3] for s in steps) == 2 + 1 + 3  # every generated token counted once
    assert len(batch) == 0


def test_a_job_generates_at_least_one_token() -> None:
    with pytest.raises(ValueError):
        ContinuousBatch(LatencyModel()).add(Job(prefill=5, decode=0))
    with pytest.raises(ValueError):
        LatencyModel(max_batch=0)


def test_replies_parse_as_the_gateway_reads_an_engine_and_wait_the_modelled_time() -> None:
    async def scenario() -> None:
        engine = SimEngine(LatencyModel(), im_end_id=7, speedup=10.0)
        stepping = asyncio.ensure_future(engine.run())
        try:
            body = GenerateBody(input_ids=list(range(1000)), sampling_params={"max_new_tokens": 20},
                                routing_key="s1")  # fmt: skip
            first = await engine.generate(body)
            longer = GenerateBody(input_ids=list(range(1100)), sampling_params={"max_new_tokens": 5},
                                  routing_key="s1")  # fmt: skip
            second = await engine.generate(longer)
        finally:
            stepping.cancel()
        reply = parse_generate_response(first)
        assert reply.output_ids[-1] == 7 and len(reply.output_ids) == 20 and reply.finish_reason == "stop"
        assert reply.prompt_tokens == 1000 and reply.weight_versions[0].version == 0
        assert second["meta_info"]["cached_tokens"] == 1020  # the first call's prompt + completion
        stats = engine.stats.as_dict()
        # modelled: prefill 1000 (36.5 ms) + 19 decodes of 1 (4.54 ms), then prefill 80 + 4 decodes,
        # each waited at a tenth
        modelled = (36.5 + 19 * 4.54 + (4.5 + 0.032 * 80) + 4 * 4.54) / 10 / 1e3
        assert stats["busy_s"] >= modelled * 0.99
        assert (
            stats["generated_tokens"] == 25 and stats["requests"] == 2 and stats["prefilled_tokens"] == 1080
        )

    asyncio.run(scenario())
