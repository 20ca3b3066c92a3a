"""The reference engine's SGLang-native endpoints over real HTTP: weight updates, pause/continue and the
per-token version spans they produce, and its input checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from cua_stream.engine.config import EngineConfig
from tests.conftest import free_port, wait_until
from tests.integration.gateway_servers import decode_rounds, serving, tiny_model_dir

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.model, pytest.mark.anyio]

PROMPT = "<|im_start|>user\nDescribe the desktop.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cua_stream.models.tiny import build_model

    out = tmp_path_factory.mktemp("tiny-weights-v1")
    build_model(seed=1).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def engine_url(tiny_model_dir: Path) -> Iterator[str]:
    """An engine of its own (the tests change its weights), in this process."""
    from cua_stream.engine.server import build_server

    # each decode round lasts at least 10 ms: a 200-token generation at least 2 s on any machine, long
    # enough for a pause sent once it decodes to land inside it
    config = EngineConfig(
        model_path=str(tiny_model_dir), port=free_port(), debug_history=16, step_latency_s=0.01
    )
    with serving(build_server(config)):
        yield f"http://127.0.0.1:{config.port}"


async def busy_s(http: httpx.AsyncClient) -> float:
    """The engine's seconds in decode rounds so far (it grows only while a request is decoded)."""
    return (await http.get("/debug/scheduler")).json()["busy_s"]


async def generate(http: httpx.AsyncClient, **sampling: Any) -> dict[str, Any]:
    body = {"text": PROMPT, "sampling_params": {"temperature": 1.0, **sampling}, "return_logprob": True}
    r = await http.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_weight_update_mid_generation_splits_the_version_spans(
    engine_url: str, tiny_model_dir: Path, other_weights: Path
) -> None:
    async with httpx.AsyncClient(base_url=engine_url, timeout=120) as http:
        info = (await http.get("/get_model_info")).json()
        assert info["weight_version"] == "0" and info["is_generation"] is True
        assert (await http.get("/model_info")).json() == info
        before = await generate(http, max_new_tokens=8, ignore_eos=True, sampling_seed=3)
        assert before["meta_info"]["weight_versions"] == [{"version": "0", "start": 0, "end": 8}]

        results: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def long_generation() -> None:
                results.append(await generate(http, max_new_tokens=300, ignore_eos=True, sampling_seed=3))

            tg.start_soon(long_generation)
            with anyio.fail_after(60):
                await decode_rounds(http, engine_url, 2)  # into the decode loop
            assert (await http.post("/pause_generation", json={"mode": "in_place"})).status_code == 200
            update = {"model_path": str(other_weights), "weight_version": "1"}
            r = await http.post("/update_weights_from_disk", json=update)
            assert r.status_code == 200 and r.json()["success"] is True
            assert (await http.post("/continue_generation", json={})).status_code == 200
        (during,) = results
        spans = during["meta_info"]["weight_versions"]
        assert [s["version"] for s in spans] == ["0", "1"]
        assert spans[0]["start"] == 0 and 0 < spans[0]["end"] == spans[1]["start"] < spans[1]["end"] == 300
        assert during["meta_info"]["weight_version"] == "1"
        assert len(during["meta_info"]["output_token_logprobs"]) == 300

        after = await generate(http, max_new_tokens=8, ignore_eos=True, sampling_seed=3)
        assert after["meta_info"]["weight_versions"] == [{"version": "1", "start": 0, "end": 8}]
        assert after["meta_info"]["output_token_logprobs"] != before["meta_info"]["output_token_logprobs"]
        assert (await http.get("/get_model_info")).json()["weight_version"] == "1"

        missing = await http.post("/update_weights_from_disk", json={"model_path": "/nonexistent/weights"})
        assert missing.status_code == 400 and missing.json()["success"] is False
        restore = {"model_path": str(tiny_model_dir), "weight_version": "2"}
        assert (await http.post("/update_weights_from_disk", json=restore)).json()["success"] is True


async def test_pause_abort_ends_generation_and_new_requests_wait_for_continue(engine_url: str) -> None:
    async with httpx.AsyncClient(base_url=engine_url, timeout=120) as http:
        results: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def long_generation() -> None:
                results.append(await generate(http, max_new_tokens=300, ignore_eos=True))

            tg.start_soon(long_generation)
            with anyio.fail_after(60):
                await decode_rounds(http, engine_url, 2)
            await http.post("/pause_generation", json={"mode": "abort"})
        (aborted,) = results
        finish = aborted["meta_info"]["finish_reason"]
        assert finish["type"] == "abort" and finish["status_code"] == 503
        assert 0 < len(aborted["output_ids"]) < 300

        async with anyio.create_task_group() as tg:

            async def queued() -> None:
                results.append(await generate(http, max_new_tokens=4, ignore_eos=True))

            busy = await busy_s(http)
            tg.start_soon(queued)

            async def held() -> bool:
                return sum((await http.get("/health")).json().values()) == 1

            with anyio.fail_after(60):
                await wait_until(held, poll_s=0.01)
            assert len(results) == 1 and await busy_s(http) == busy  # held, not decoded: paused
            await http.post("/continue_generation")
        assert results[1]["meta_info"]["finish_reason"] == {"type": "length", "length": 4}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"input_ids": [[1, 2], [3]]}, "batches"),
        ({"input_ids": [1, 151655, 2]}, "image pad"),
        ({"input_ids": [1, 2], "sampling_params": {"frequency_penalty": 0.5}}, "frequency_penalty"),
        ({"input_ids": [1, 2], "stream": True}, "stream"),
        ({"input_ids": [1, 2], "image_data": ["%%%"]}, "image_data"),
        ({"input_ids": [1, 2], "logprob_start_len": 0}, "logprob_start_len"),
    ],
)
async def test_invalid_generate_requests_are_400(engine_url: str, body: dict[str, Any], needle: str) -> None:
    async with httpx.AsyncClient(base_url=engine_url, timeout=60) as http:
        r = await http.post("/generate", json=body)
    assert r.status_code == 400 and needle in r.text


async def test_a_sampling_seed_reproduces_a_generation(engine_url: str) -> None:
    async with httpx.AsyncClient(base_url=engine_url, timeout=60) as http:
        first = await generate(http, max_new_tokens=12, ignore_eos=True, sampling_seed=42)
        again = await generate(http, max_new_tokens=12, ignore_eos=True, sampling_seed=42)
        other = await generate(http, max_new_tokens=12, ignore_eos=True, sampling_seed=43)
    assert first["output_ids"] == again["output_ids"]
    assert first["meta_info"]["output_token_logprobs"] == again["meta_info"]["output_token_logprobs"]
    assert other["output_ids"] != first["output_ids"]


async def test_scoring_a_forced_completion_gives_the_logprobs_sampling_it_gave(engine_url: str) -> None:
    """SGLang's scoring request (``max_new_tokens=0``, input logprobs from ``logprob_start_len``): the
    logprobs of a completion fed back as input equal those the engine reported when it sampled it."""
    async with httpx.AsyncClient(base_url=engine_url, timeout=120) as http:
        sampled = await generate(http, max_new_tokens=6, ignore_eos=True, sampling_seed=11)
        info = (await http.get("/get_model_info")).json()
        prompt = await http.post("/generate", json={"text": PROMPT, "sampling_params": {"max_new_tokens": 0}})
        assert prompt.status_code == 200, prompt.text
        n_prompt = prompt.json()["meta_info"]["prompt_tokens"]
        from transformers import AutoTokenizer

        ids = AutoTokenizer.from_pretrained(info["model_path"]).encode(PROMPT, add_special_tokens=False)
        assert len(ids) == n_prompt
        body = {
            "input_ids": ids + sampled["output_ids"],
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": n_prompt - 1,
        }
        r = await http.post("/generate", json=body)
        assert r.status_code == 200, r.text
        scored = r.json()
        assert scored["output_ids"] == []
        first, *forced = scored["meta_info"]["input_token_logprobs"]
        assert first == [None, ids[-1], None]  # SGLang's: the token at logprob_start_len is not scored
        assert [t for _, t, _ in forced] == sampled["output_ids"]
        expected = [lp for lp, _, _ in sampled["meta_info"]["output_token_logprobs"]]
        assert [lp for lp, _, _ in forced] == pytest.approx(expected, abs=1e-4)
        assert scored["meta_info"]["weight_version"] == info["weight_version"]

        for bad, needle in (
            ({**body, "sampling_params": {"max_new_tokens": 2}}, "max_new_tokens=0"),
            ({**body, "logprob_start_len": len(body["input_ids"])}, "must lie in"),
            ({**body, "return_logprob": False}, "return_logprob"),
        ):
            r = await http.post("/generate", json=bad)
            assert r.status_code == 400 and needle in r.text, r.text


@pytest.mark.parametrize("mode", ["in_place", "retract"])
async def test_a_retracted_request_is_prefilled_again_under_the_new_weights_as_sglang_does(
    engine_url: str, tiny_model_dir: Path, other_weights: Path, mode: str
) -> None:
    """Both modes freeze a request across the update and answer SGLang's shapes; ``in_place`` keeps its
    cache (the prefix's keys and values from the old weights), ``retract`` recomputes it, so only then
    are the new weights' tokens scored as a fresh pass of the new weights over the whole sequence
    scores them."""
    async with httpx.AsyncClient(base_url=engine_url, timeout=120) as http:
        old = (await http.get("/get_model_info")).json()["weight_version"]
        rid = f"frozen-{mode}"
        results: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def long_generation() -> None:
                body = {
                    "text": PROMPT,
                    "rid": rid,
                    "sampling_params": {"temperature": 1.0, "max_new_tokens": 200, "ignore_eos": True},
                    "return_logprob": True,
                }
                results.append((await http.post("/generate", json=body)).json())

            tg.start_soon(long_generation)
            with anyio.fail_after(60):
                await decode_rounds(http, engine_url, 2)
            paused = await http.post("/pause_generation", json={"mode": mode})
            assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
            new = str(int(old) + 1)
            update = {"model_path": str(other_weights), "weight_version": new}
            assert (await http.post("/update_weights_from_disk", json=update)).json()["success"] is True
            resumed = await http.post("/continue_generation", json={})
            assert resumed.json() == {"message": "Generation continued successfully.", "status": "ok"}
        (frozen,) = results
        spans = frozen["meta_info"]["weight_versions"]
        assert [s["version"] for s in spans] == [old, new]
        cut = spans[0]["end"]
        prompt_ids = {r["rid"]: r for r in (await http.get("/debug/requests")).json()}[rid]["input_ids"]
        body = {
            "input_ids": prompt_ids + frozen["output_ids"],
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": len(prompt_ids) + cut - 1,
        }
        scored = (await http.post("/generate", json=body)).json()["meta_info"]["input_token_logprobs"]
        fresh = [lp for lp, _, _ in scored[1:]]
        reported = [lp for lp, _, _ in frozen["meta_info"]["output_token_logprobs"][cut:]]
        if mode == "retract":
            assert reported == pytest.approx(fresh, abs=1e-4)
        else:
            assert reported != pytest.approx(fresh, abs=1e-4)
        restore = {"model_path": str(tiny_model_dir), "weight_version": str(int(new) + 1)}
        assert (await http.post("/update_weights_from_disk", json=restore)).json()["success"] is True


async def test_the_scheduler_counters_count_decode_rounds(engine_url: str) -> None:
    """GET /debug/scheduler (benchmarks read the engine's busy share from it): a generation's rounds add
    to busy_s, and to slot_s once per request they advanced."""
    async with httpx.AsyncClient(base_url=engine_url, timeout=60) as http:
        before = (await http.get("/debug/scheduler")).json()
        await generate(http, max_new_tokens=12, ignore_eos=True)
        after = (await http.get("/debug/scheduler")).json()
    busy, slots = after["busy_s"] - before["busy_s"], after["slot_s"] - before["slot_s"]
    assert busy > 0 and abs(slots - busy) < 1e-9  # one request: each round advanced exactly it
