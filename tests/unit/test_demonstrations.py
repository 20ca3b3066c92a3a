"""Demonstrations: the work record-oracle issues, which episodes SFT trains on, its batches and loss,
its config, and the forced-completion pieces of the gateway's engine protocol (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import torch

from consumers.trainer.episodes.samples import assemble
from consumers.trainer.sft.demonstrations import SftConfig, batches, demonstrations, sft_loss, worth_measuring
from consumers.trainer.stream.feeder import instance_work
from cua_stream.config import ConfigError, convert
from cua_stream.errors import EngineProtocolError
from cua_stream.events import Discard, Reward, ScoreEvent, TurnEvent
from cua_stream.gateway.engine_client import EngineClient, JsonIds, parse_scored_response
from cua_stream.gateway.session import SessionSpec
from cua_stream.identity import layout_seed
from tests.unit.test_trainer_samples import call


def score(episode: str, verdict: Reward | Discard, attempt: int = 0) -> ScoreEvent:
    return ScoreEvent(
        run_id="r", group_id="g", episode_id=episode, attempt=attempt, verdict=verdict, policy_version=0,
        scored_at=0.0,
    )  # fmt: skip


def calls_of(episode: str, attempt: int = 0) -> list[TurnEvent]:
    out = [call(0, None, [1, 2], [3, 4]), call(1, 0, [5], [6, 7])]
    return [msgspec.structs.replace(c, episode_id=episode, attempt=attempt) for c in out]  # type: ignore[misc]


def test_instance_work_is_one_teacher_episode_per_task_and_seed() -> None:
    work = instance_work(
        "demo",
        ["click-button", "fill-form"],
        [7, 8],
        teacher="oracle",
        sampling={"temperature": 1.0},
        now=1.0,
    )
    assert [(w.task.name, layout_seed(w)) for w in work] == [
        ("click-button", 7), ("fill-form", 7), ("click-button", 8), ("fill-form", 8),
    ]  # fmt: skip
    assert all(w.teacher == "oracle" and w.group_size == 1 for w in work)
    assert len({w.episode_id for w in work}) == len({w.group_id for w in work}) == 4


def test_only_rewarded_episodes_scored_attempts_are_demonstrations() -> None:
    scores = [
        score("good", Reward(value=1.0)),
        score("half", Reward(value=0.5)),
        score("lost", Discard(reason="sandbox_lost")),
        score("moved", Reward(value=1.0), attempt=2),  # its calls are of attempt 1: cut by a crash
        score("silent", Reward(value=1.0)),
    ]
    calls = calls_of("good") + calls_of("half") + calls_of("lost") + calls_of("moved", attempt=1)
    demos = demonstrations(scores, calls)
    assert demos.episodes == 1 and [s.episode_id for s in demos.samples] == ["good"]
    assert demos.samples == assemble(calls_of("good")).samples  # GRPO's own assembly and masks
    assert demos.rejected == {"reward 0.5": 1, "discard: sandbox_lost": 1, "no calls": 2}
    assert demonstrations(scores, calls, min_reward=0.5).episodes == 2


def test_batches_cover_every_sample_once_per_epoch_in_a_seeded_order() -> None:
    one = batches(10, 4, epoch=1, seed=0)
    assert [len(b) for b in one] == [4, 4, 2] and sorted(i for b in one for i in b) == list(range(10))
    assert one == batches(10, 4, epoch=1, seed=0) != batches(10, 4, epoch=2, seed=0)


def test_sft_loss_is_the_mean_negative_logprob_of_the_masked_tokens() -> None:
    logp = [torch.tensor([0.0, -1.0, -2.0]), torch.tensor([0.0, -4.0])]
    masks = [torch.tensor([0, 1, 1], dtype=torch.uint8), torch.tensor([0, 1], dtype=torch.uint8)]
    loss, n = sft_loss(logp, masks)
    assert n == 3 and float(loss) == pytest.approx(7 / 3)
    shifted = [torch.tensor([1, 1, 0], dtype=torch.uint8), torch.tensor([1, 0], dtype=torch.uint8)]
    assert float(sft_loss(logp, shifted)[0]) == pytest.approx(1 / 3)


def test_sft_config_errors_name_the_field(tmp_path: object) -> None:
    from cua_stream.app.demo import tiny_model_dir

    model = str(tiny_model_dir())
    with pytest.raises(ConfigError, match="sft.run_ids"):
        convert(SftConfig, "sft", {"run_ids": [], "model_path": model})
    with pytest.raises(ConfigError, match="sft.epochs"):
        convert(SftConfig, "sft", {"run_ids": ["r"], "model_path": model, "epochs": 0})
    with pytest.raises(ConfigError, match="sft.model_path"):
        convert(SftConfig, "sft", {"run_ids": ["r"], "model_path": "/nowhere"})
    with pytest.raises(ConfigError, match="sft.target_nll"):
        convert(SftConfig, "sft", {"run_ids": ["r"], "model_path": model, "target_nll": 0})
    with pytest.raises(ConfigError, match="sft.drawn"):
        convert(SftConfig, "sft", {"run_ids": ["r"], "model_path": model, "drawn": -1})


def test_the_nll_is_measured_only_once_the_running_loss_is_near_the_target() -> None:
    assert not worth_measuring(0.5, None)
    assert not worth_measuring(0.21, 0.1) and worth_measuring(0.2, 0.1) and worth_measuring(0.05, 0.1)


@pytest.mark.parametrize("teacher", ["../admin", "/oracle", "oracle//x", "oracle/../../x", "a b", ""])
def test_a_session_teacher_is_a_path_under_the_teacher_url(teacher: str) -> None:
    body = {"run_id": "r", "group_id": "g", "episode_id": "e", "sampling": {"temperature": 1.0}}
    assert msgspec.convert({**body, "teacher": "oracle/click-button/7"}, SessionSpec).teacher
    with pytest.raises(msgspec.ValidationError, match="teacher"):
        msgspec.convert({**body, "teacher": teacher}, SessionSpec)


@pytest.mark.anyio
async def test_a_scoring_request_asks_for_the_forced_ids_logprobs_from_the_prompts_last_token() -> None:
    """SGLang scores no logprob for the token at ``logprob_start_len``: the request starts one before the
    forced ids, so that each of them gets its logprob."""
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(msgspec.json.decode(request.content))
        meta = {
            "input_token_logprobs": [[None, 3, None], [-1.5, 9, None], [-0.5, 10, None]],
            "prompt_tokens": 5,
        }
        return httpx.Response(200, json={"text": "", "output_ids": [], "meta_info": meta})

    client = EngineClient("http://engine", transport=httpx.MockTransport(answer))
    reply = await client.score(JsonIds.of([1, 2, 3]), [], [9, 10], "hi", 1.0)
    await client.aclose()
    (body,) = sent
    assert body["input_ids"] == [1, 2, 3, 9, 10] and body["logprob_start_len"] == 2
    assert body["return_logprob"] is True and body["sampling_params"]["max_new_tokens"] == 0
    assert (reply.output_ids, reply.logprobs, reply.prompt_tokens) == ([9, 10], [-1.5, -0.5], 3)


def test_a_scored_reply_becomes_the_forced_completion_or_a_protocol_error() -> None:
    meta = {
        "input_token_logprobs": [[None, 3, None], [-1.5, 9, None], [-0.5, 10, None]],
        "weight_version": "4",
        "prompt_tokens": 5,
    }
    reply = parse_scored_response({"meta_info": meta}, [9, 10], "hi")
    assert (reply.text, reply.output_ids, reply.logprobs, reply.finish_reason) == (
        "hi",
        [9, 10],
        [-1.5, -0.5],
        "stop",
    )
    assert [(s.version, s.start, s.end) for s in reply.weight_versions] == [(4, 0, 2)]
    with pytest.raises(EngineProtocolError, match=r"input_token_logprobs\[2\] does not name forced id 10"):
        parse_scored_response(
            {"meta_info": {**meta, "input_token_logprobs": [[None, 3], [-1.5, 9], [-0.5, 11]]}}, [9, 10], ""
        )
    with pytest.raises(EngineProtocolError, match="2 entries for the prompt's last token and 2 forced ids"):
        parse_scored_response(  # the engine scored from the first forced id: the reply lacks one entry
            {"meta_info": {**meta, "input_token_logprobs": [[-1.5, 9], [-0.5, 10]]}}, [9, 10], ""
        )


@pytest.mark.model
def test_a_probe_judges_saved_weights_and_ends_sft_where_it_says(tmp_path: Path) -> None:
    from consumers.trainer.sft_run import EpochStats, Probe, train
    from cua_stream.app.demo import tiny_model_dir

    demos = demonstrations([score("good", Reward(value=1.0))], calls_of("good"))
    config = SftConfig(run_ids=["r"], model_path=str(tiny_model_dir()), out_dir=str(tmp_path / "out"), epochs=5,
                       lr=1e-3)  # fmt: skip
    judged: list[tuple[float, float | None, bool]] = []

    def at_epoch_2(weights: Path, epoch: EpochStats) -> bool:
        judged.append((epoch.epoch, epoch.nll, (weights / "model.safetensors").exists()))
        return epoch.epoch == 2

    result = train(config, demos, probe=Probe(from_nll=100.0, enough=at_epoch_2))
    assert result.probed_enough and not result.reached_target and len(result.epochs) == 2
    assert [(e, saved) for e, _, saved in judged] == [(1, True), (2, True)]  # saved before each judgement
    assert all(nll is not None and nll < result.nll_before for _, nll, _ in judged)
    assert result.nll_after == judged[-1][1] and result.out == tmp_path / "out"

    # no probe above the NLL it starts from: all the epochs, the judge never asked
    judged.clear()
    whole = train(config, demos, probe=Probe(from_nll=1e-6, enough=at_epoch_2))
    assert not whole.probed_enough and len(whole.epochs) == 5 and judged == []

    # judged within an epoch too: halfway through its batches (one sample each), then at its end
    halves = msgspec.structs.replace(config, batch_size=1)
    two = demonstrations([score("good", Reward(value=1.0)), score("also", Reward(value=1.0))],
                         calls_of("good") + calls_of("also"))  # fmt: skip
    assert len(two.samples) == 2
    judged.clear()
    early = train(
        halves, two, probe=Probe(100.0, lambda w, e: at_epoch_2(w, e) or e.epoch == 1.5, per_epoch=2)
    )
    assert [e for e, _, _ in judged] == [0.5, 1, 1.5] and early.probed_enough
    assert [e.epoch for e in early.epochs] == [1, 1.5] and early.nll_after == judged[-1][1]


def test_a_probe_is_judged_at_equal_shares_of_an_epoch() -> None:
    from consumers.trainer.sft_run import Probe

    def never(weights: Path, epoch: object) -> bool:
        return False

    assert Probe(1.0, never, per_epoch=2).points(6) == {3, 6}
    assert Probe(1.0, never, per_epoch=3).points(4) == {1, 3, 4}
    assert Probe(1.0, never).points(6) == {6}
    assert Probe(1.0, never, per_epoch=2).points(1) == {1}  # one batch: judged at the end only
    with pytest.raises(ValueError, match="per_epoch: 1 or more, not 0"):
        Probe(1.0, never, per_epoch=0)


def test_an_sft_epochs_line_says_its_loss_tokens_time_and_nll() -> None:
    from consumers.trainer.sft_run import EpochStats

    assert EpochStats(2, 0.5, 100, 1.5, 0.2).said(10) == (
        "epoch 2/10: loss 0.500 over 100 tokens (1.5 s); NLL after it 0.200"
    )
    assert EpochStats(8.5, 0.25, 7, 30.0).said() == "epoch 8.5: loss 0.250 over 7 tokens (30.0 s)"
