"""The scorer's transform (dedup, restore, staged metrics), its metrics text and endpoint, and its config,
without a broker: the score topic is an in-memory list of committed deliveries (unit tests only)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from consumers.scorer.config import ScorerConfig, scorer_config
from consumers.scorer.transform import ScorerMetrics, ScoreTransform
from cua_stream.bus.codec import Delivery
from cua_stream.config import ConfigError
from cua_stream.events import Discard, ExceptionRecord, OutcomeEvent, Phase, Reward, ScoreEvent
from cua_stream.metrics import Registry, serve_metrics
from cua_stream.scoring import RewardChoice
from cua_stream.topics import SCORES

pytestmark = pytest.mark.anyio


def outcome(i: int, **kw: object) -> OutcomeEvent:
    fields: dict = {
        "run_id": "run-1",
        "group_id": f"g{i // 4}",
        "episode_id": f"ep-{i}",
        "task": "t",
        "policy_version": 7,
        "agent_started": True,
        "rewards": {"reward": 1.0},
        "started_at": 0.0,
        "finished_at": 1.0,
    }
    fields.update(kw)
    return OutcomeEvent(**fields)


def delivered(event: object, partition: int = 0, offset: int = 0) -> Delivery:
    return Delivery(event, "t.outcomes", partition, offset, None, b"", (), 0)  # type: ignore[arg-type]


class CommittedScores:
    """The score topic's committed records, per partition (what ``scan`` would return)."""

    def __init__(self) -> None:
        self.records: list[Delivery] = []

    def commit(self, outputs: list, partition: int) -> None:
        for _, ev in outputs:
            self.records.append(delivered(ev, partition, len(self.records)))

    async def read(self) -> AsyncIterator[Delivery]:
        for d in self.records:
            yield d


def make(log: CommittedScores, **kw: object) -> ScoreTransform:
    return ScoreTransform(log.read, clock=lambda: 123.0, **kw)  # type: ignore[arg-type]


async def test_a_score_carries_the_episode_identity_and_the_verdict() -> None:
    t = make(CommittedScores())
    await t.restore(frozenset({0}))
    [(spec, score)] = t.apply(delivered(outcome(1)))
    assert spec is SCORES
    assert score == ScoreEvent(
        run_id="run-1",
        group_id="g0",
        episode_id="ep-1",
        verdict=Reward(value=1.0, reason="ok"),
        policy_version=7,
        scored_at=123.0,
    )


async def test_an_outcome_delivered_twice_is_scored_once() -> None:
    t = make(CommittedScores())
    await t.restore(frozenset({0, 1}))
    first = t.apply(delivered(outcome(1), 0, 10))
    assert len(first) == 1
    assert t.apply(delivered(outcome(1), 0, 11)) == []  # same batch
    assert len(t.apply(delivered(outcome(2), 1, 12))) == 1
    t.committed()
    assert t.apply(delivered(outcome(1), 0, 13)) == []  # a later batch
    t.committed()
    assert t.metrics.duplicates.value() == 2


async def test_restore_rebuilds_dedup_from_the_committed_scores_only() -> None:
    log = CommittedScores()
    t = make(log)
    await t.restore(frozenset({0}))
    log.commit(list(t.apply(delivered(outcome(1)))), partition=0)  # committed
    t.committed()
    staged = t.apply(delivered(outcome(2)))  # this batch is aborted: never reaches the log
    assert staged
    await t.restore(frozenset({0}))  # what the processor does after an abort
    assert t.is_scored("ep-1") and not t.is_scored("ep-2")
    assert t.apply(delivered(outcome(1))) == []
    assert len(t.apply(delivered(outcome(2)))) == 1  # re-scored on the retry


async def test_dedup_does_not_depend_on_where_the_outcome_was_partitioned() -> None:
    log = CommittedScores()
    t = make(log, partitions=4)
    await t.restore(frozenset({0, 1}))
    log.commit(list(t.apply(delivered(outcome(1), 0))), 2)  # the score went to the group's partition
    log.commit(list(t.apply(delivered(outcome(2), 1))), 3)
    t.committed()
    await t.restore(frozenset({1}))  # a new assignment: every score partition is read all the same
    assert t.is_scored("ep-1") and t.is_scored("ep-2")
    assert t.apply(delivered(outcome(1), 1)) == []  # the duplicate arrives on another partition
    assert t.metrics.known_episodes.value() == 2


async def test_metrics_count_only_committed_verdicts() -> None:
    t = make(CommittedScores())
    await t.restore(frozenset({0}))
    lost = ExceptionRecord(type="RuntimeRequestError", message="", phase=Phase.AGENT, module="harbor.x")
    t.apply(delivered(outcome(1)))
    t.apply(delivered(outcome(2, exception=lost)))
    await t.restore(frozenset({0}))  # aborted: nothing counted
    assert t.metrics.verdicts.samples() == {}
    t.apply(delivered(outcome(1)))
    t.apply(delivered(outcome(2, exception=lost)))
    t.apply(delivered(outcome(3, exception=lost)))
    t.committed()
    assert t.metrics.verdicts.samples() == {
        ("reward", "ok", "finished"): 1.0,
        ("discard", "sandbox_lost", "sandbox_lost"): 2.0,
    }
    text = t.metrics.registry.render()
    assert 'cua_scorer_verdicts_total{verdict="discard",reason="sandbox_lost",rule="sandbox_lost"} 2' in text
    assert "# TYPE cua_scorer_verdicts_total counter" in text


async def test_the_configured_reward_choice_is_used() -> None:
    t = make(CommittedScores(), choice=RewardChoice(combine="max"))
    await t.restore(frozenset({0}))
    [(_, score)] = t.apply(delivered(outcome(1, rewards={"a": 0.2, "b": 0.9})))
    assert score.verdict == Reward(value=0.9, reason="ok")


async def test_a_record_that_is_not_an_outcome_is_refused() -> None:
    t = make(CommittedScores())
    await t.restore(frozenset({0}))
    score = ScoreEvent(
        run_id="r", group_id="g", episode_id="e", verdict=Discard(reason="x"), policy_version=0, scored_at=0
    )
    with pytest.raises(TypeError, match="expected OutcomeEvent"):
        t.apply(delivered(score))


def test_registry_renders_prometheus_text() -> None:
    r = Registry()
    c = r.counter("x_total", "Things.", ("reason",))
    g = r.gauge("y", "Level.")
    c.inc(reason='say "hi"\n')
    c.inc(2, reason="a")
    g.set(3.5)
    assert r.render() == (
        "# HELP x_total Things.\n# TYPE x_total counter\n"
        'x_total{reason="a"} 2\nx_total{reason="say \\"hi\\"\\n"} 1\n'
        "# HELP y Level.\n# TYPE y gauge\ny 3.5\n"
    )
    with pytest.raises(ValueError, match="only goes up"):
        c.inc(-1, reason="a")
    with pytest.raises(ValueError, match="expected labels"):
        c.inc(other="a")
    with pytest.raises(ValueError, match="registered twice"):
        r.gauge("y", "again")


async def test_metrics_endpoint_serves_the_registry() -> None:
    metrics = ScorerMetrics()
    metrics.duplicates.inc(4)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_metrics, metrics.registry.render, "127.0.0.1", 0)
        async with await anyio.connect_tcp("127.0.0.1", port) as s:
            await s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            with anyio.fail_after(5):
                try:
                    while True:
                        reply += await s.receive()
                except anyio.EndOfStream:
                    pass
        tg.cancel_scope.cancel()
    head, body = reply.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK") and b"text/plain; version=0.0.4" in head
    assert b"cua_scorer_duplicate_outcomes_total 4\n" in body


def test_config_layers_and_defaults() -> None:
    cfg = scorer_config(
        {"bus": {"topic_prefix": "exp"}, "scorer": {"combine": "mean", "max_batch": 50}},
        overrides={"reward_key": "success", "metrics_port": None},
        bus_overrides={"bootstrap_servers": "kafka:9092"},
    )
    assert (cfg.reward_key, cfg.combine, cfg.max_batch) == ("success", "mean", 50)
    assert (cfg.bus.topic_prefix, cfg.bus.bootstrap_servers) == ("exp", "kafka:9092")
    assert (cfg.group, cfg.instance) == ("exp.scorer", "exp.scorer-0")
    assert cfg.choice == RewardChoice(key="success", combine="mean")
    assert ScorerConfig(transactional_id="s-3").instance == "s-3"


@pytest.mark.parametrize(
    ("scorer", "message"),
    [
        ({"combin": "mean"}, "scorer.combin: unknown field"),
        ({"combine": "avg"}, "scorer.combine"),
        ({"max_batch": 0}, "scorer.max_batch"),
        ({"metrics_port": 70000}, "scorer.metrics_port"),
        ({"bus": {"topic_prefix": "x"}}, "scorer.bus"),
    ],
)
def test_config_errors_name_the_field(scorer: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        scorer_config({"scorer": scorer})
