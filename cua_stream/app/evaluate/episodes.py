"""Evaluating a policy: a plan's episodes run through the producer and scorer, folded into the results
file's contents, and the report published on the evals topic. The one path ``eval`` (a model, a
script, a training run's versions) and ``learn`` (its base, SFT and GRPO policies, its SFT probes)
share: what either calls an evaluation is this.

The episodes run in the producers' ``eval`` lane under a run id starting with ``eval-`` (a trainer
never takes such work); the policy is whatever the gateway the producer reaches serves at the time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from cua_stream.evaluation.plan import EvalPlan
from cua_stream.evaluation.results import EvalResults, episodes_of
from cua_stream.identity import EVAL_RUN_PREFIX, is_eval_run

if TYPE_CHECKING:
    from cua_stream.config import BusConfig
    from cua_stream.events import EvalReport, OutcomeEvent, ScoreEvent
    from producers.config import ProducerConfig


@dataclass(frozen=True)
class Evaluation:
    """What each evaluation of one command runs: its plan, the producer that plays it and the sampling
    (or the scripted ``teacher`` forcing the replies)."""

    plan: EvalPlan
    producer: ProducerConfig
    sampling: dict[str, Any]
    teacher: str | None = None


async def evaluate(ev: Evaluation, run_id: str, policy: str) -> EvalResults:
    """Run ``ev``'s episodes under ``run_id`` (an episode a killed earlier start of the run issued is not
    issued again: none is played twice) until each is scored (bounded: an episode never scored is
    ``unscored``); ``policy`` names what was evaluated in the results."""
    from consumers.trainer.stream.feeder import instance_work
    from cua_stream.app.rollouts import run_episodes

    if not is_eval_run(run_id):
        raise ValueError(f"an evaluation's run id starts with {EVAL_RUN_PREFIX!r}, got {run_id!r}")
    plan = ev.plan
    producer = eval_producer(ev.producer, run_id)
    work = instance_work(run_id, plan.tasks, plan.seeds, samples=plan.samples, sampling=ev.sampling,
                         now=time.time(), teacher=ev.teacher)  # fmt: skip
    scores = await run_episodes(producer, work, resume=True)
    outcomes = await scored_outcomes(producer.bus, scores)
    return EvalResults(
        run_id=run_id,
        policy=policy,
        environment=producer.environment,
        samples=plan.samples,
        seeds=list(plan.seeds),
        tasks=[t.name for t in plan.tasks],
        created_at=time.time(),
        episodes=episodes_of(work, scores, outcomes),
    )


def eval_producer(producer: ProducerConfig, run_id: str) -> ProducerConfig:
    """The producer of evaluation ``run_id``: in the ``eval`` lane (beside training's producers), playing
    only its own run's work unless it was given runs (``learn``'s: its evaluations are its runs'), in a
    consumer group of its own. In the lane's shared group, an evaluation started after a killed one first
    played the killed one's leftover work (an hour of it, once), and its own waited. Pure."""
    runs = producer.runs or [run_id.removeprefix(EVAL_RUN_PREFIX)]
    return msgspec.structs.replace(producer, lane="eval", runs=runs)


async def publish_report(bus: BusConfig, report: EvalReport) -> None:
    from cua_stream.bus.producer import EventProducer
    from cua_stream.topics import EVALS

    async with EventProducer(bus) as producer:
        await producer.publish(EVALS, report)


async def scored_outcomes(
    bus: BusConfig, scores: dict[str, ScoreEvent]
) -> dict[tuple[str, int], OutcomeEvent]:
    """The outcomes of the scored attempts (each durable before its score), by episode id and attempt."""
    from cua_stream.bus.reader import scan
    from cua_stream.topics import OUTCOMES

    wanted = {(s.episode_id, s.attempt) for s in scores.values()}
    found: dict[tuple[str, int], OutcomeEvent] = {}
    async for d in scan(bus, OUTCOMES):
        key = (d.event.episode_id, d.event.attempt)
        if key in wanted:
            found[key] = d.event
    return found
