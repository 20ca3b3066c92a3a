"""Attempts: a work request run again after a producer crash records its calls under a new attempt; the
gateway stamps the session's attempt on every record and the trainer trains the scored attempt only."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from consumers.trainer.episodes.checks import Vocabulary
from consumers.trainer.stream.join import Join
from cua_stream.blobs import LocalBlobStore
from cua_stream.bus.codec import Delivery
from cua_stream.events import Reward, ScoreEvent
from tests.unit.gateway_support import Harness, qwen_processor, renderer, user_turn
from tests.unit.test_trainer_samples import GEOMETRY, call

__all__ = ["qwen_processor", "renderer"]  # fixtures


@pytest.mark.anyio
async def test_the_trainer_trains_the_scored_attempts_calls_only(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")  # the model is never loaded here
    config = TrainerConfig(run_id="r", model_path=str(tmp_path), group_size=1, checkpoint_dir=str(tmp_path))
    trainer = Trainer(config)
    # what the decision reads of the backend: its vocabulary and blob store
    trainer.backend = SimpleNamespace(  # type: ignore[assignment]
        vocabulary=lambda: Vocabulary(size=1000, image_token_id=999, images=GEOMETRY),
        blobs=LocalBlobStore(tmp_path / "blobs"),
    )
    join = Join("r", group_size=1, call_topics=["t"])
    crashed = [
        msgspec.structs.replace(call(i, i - 1 if i else None, [1], [10 + i]), attempt=0) for i in range(3)
    ]
    rerun = [
        msgspec.structs.replace(call(i, i - 1 if i else None, [2], [20 + i]), attempt=1) for i in range(2)
    ]
    for offset, record in enumerate([*crashed, *rerun]):
        # the two attempts reuse seq numbers and call ids would differ in practice: make them unique here
        record = msgspec.structs.replace(record, call_id=f"a{record.attempt}-{record.call_id}",
                                         parent_call_id=record.parent_call_id and f"a{record.attempt}-{record.parent_call_id}")  # fmt: skip
        join.add(Delivery(record, "t", 0, offset, None, b"", (), 0), now=0)
    score = ScoreEvent(run_id="r", group_id="g", episode_id="e", attempt=1, verdict=Reward(value=1.0),
                       policy_version=0, scored_at=0)  # fmt: skip
    group = join.add(Delivery(score, "s", 0, 0, None, b"", (), 0), now=0)
    assert group is not None
    judged = await trainer._evaluate(group)
    decision, samples, faults = judged.decision, judged.samples, judged.faults
    (sample,) = samples["e"]
    assert list(sample.tokens) == [2, 20, 2, 21]  # attempt 1's calls; attempt 0's never reached an outcome
    assert decision.train and faults == []


@pytest.mark.anyio
async def test_the_gateway_stamps_the_sessions_attempt_on_every_record(
    renderer: object, tmp_path: Path
) -> None:
    harness = Harness(renderer, tmp_path)  # type: ignore[arg-type]
    async with harness.http:
        body = {
            "run_id": "r",
            "group_id": "g",
            "episode_id": "e",
            "attempt": 2,
            "sampling": {"temperature": 0.8},
        }
        sid = (await harness.http.post("/sessions", json=body)).json()["session_id"]
        assert (await harness.chat(sid, [user_turn("hi")])).status_code == 200
        assert [t.attempt for t in harness.turns()] == [2]
        assert (await harness.http.get(f"/sessions/{sid}")).json()["attempt"] == 2
        bad = {**body, "attempt": -1, "session_id": "x"}
        assert (await harness.http.post("/sessions", json=bad)).status_code == 400
