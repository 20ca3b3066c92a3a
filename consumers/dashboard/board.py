"""The board: what the dashboard shows, folded from the records as they arrive. Pure: no I/O.

Per step: mean reward, logprob gap, grad norm, policy version (``TrainStep``); verdicts by reason
(``ScoreEvent``); dropped groups by reason; the staleness of every trained group (how many versions its
work lagged the weights it trained); throughput (episodes finished per minute of record time); call
latency (engine and gateway time of the recent calls); and the recent episodes, each with its calls in
order (images by hash, completion tokens), its outcome and its verdict; per ``learn`` run its closing
table (success per task of the blind baseline, base, after SFT, after GRPO); and apart from the live
steps, each retrain's (``cua-stream retrain``: the source's groups trained again) figures per step. Memory is bounded: the recent
calls and episodes are kept in fixed windows.

So is the summary the page gets, whatever the records hold (anyone who reaches the broker writes them):
a string is kept to ``TEXT_KEPT`` characters, counts by reason to ``REASONS_KEPT`` reasons (new ones past
that are counted under ``OTHER``) of which the ``REASONS_SHOWN`` most common are shown, and an evaluation
to its first ``TASKS_SHOWN`` tasks and ``overall``, with the number it has (the page says "showing N of M
tasks"). Before, 20 reports of 10,000 tasks each made a 17.9 MB summary that the page could not draw.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cua_stream.evaluation.stats import OVERALL
from cua_stream.events import (
    CallRecord,
    DeadLetter,
    Discard,
    EvalReport,
    EvalTask,
    GroupDropped,
    OutcomeEvent,
    PolicyVersion,
    ScoreEvent,
    TrainStep,
    WorkRequest,
)
from cua_stream.learn_table import rows_json, stage_of, stage_table
from cua_stream.metrics import quantile
from cua_stream.versions import staleness, trained_from

EPISODES_KEPT = 300
EVALS_KEPT = 100
CALLS_KEPT = 2000
GROUP_VERSIONS_KEPT = 20_000
LEARN_RUNS_KEPT = 20
LEARN_RUNS_SHOWN = 3
RETRAINS_KEPT = 20
RETRAIN_STEPS_KEPT = 500
TASKS_SHOWN = 40
"""Tasks of an evaluation (and rows of a learn run's table) shown, besides ``overall``."""
STEP_TASKS_SHOWN = 20
"""Tasks of a step's reward by task shown (its chart draws a line per task)."""
REASONS_KEPT = 1000
REASONS_SHOWN = 30
"""Reasons counted apart (verdicts, drops, dead letters, staleness), and shown by the page (the most
common; the rest as one notice)."""
TEXT_KEPT = 200
OTHER = "(other reasons)"


@dataclass
class Call:
    seq: int
    kind: str
    attempt: int
    completion_ids: list[int]
    finish_reason: str
    images: list[str]
    """sha256 of each image of the call's new prompt part (served from the blob store)."""
    policy_version: int
    engine_ms: float
    gateway_ms: float


@dataclass
class Episode:
    episode_id: str
    group_id: str
    task: str = ""
    calls: list[Call] = field(default_factory=list)
    outcome: dict[str, Any] | None = None
    verdict: str = ""
    """``reward 1 (ok)`` or ``discard (sandbox_lost)``; empty until scored."""
    reward: float | None = None
    """The reward, once scored (None for a discard)."""


@dataclass
class Board:
    steps: list[dict[str, float]] = field(default_factory=list)
    verdicts: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    staleness: Counter[int | str] = field(default_factory=Counter)
    """Trained groups by how many versions their work lagged (``OTHER``: past ``REASONS_KEPT`` lags)."""
    finished_per_minute: Counter[int] = field(default_factory=Counter)
    """Episodes finished (outcomes), by minute of their finish time (epoch minutes)."""
    latency: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=CALLS_KEPT))
    """(engine ms, gateway ms) of the recent calls."""
    episodes: OrderedDict[str, Episode] = field(default_factory=OrderedDict)
    group_versions: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """The policy version each recent group's work was issued under (for staleness)."""
    trained_unmatched: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """Trained groups whose work record has not been read yet (topics are read side by side, in no
    order between them), with the version they trained into: counted when their work arrives."""
    group_tasks: OrderedDict[str, str] = field(default_factory=OrderedDict)
    group_rewards: OrderedDict[str, list[float]] = field(default_factory=OrderedDict)
    """The recent groups' tasks and rewards (for each step's reward by task, whatever order the topics
    are read in)."""
    group_steps: OrderedDict[str, TrainStep] = field(default_factory=OrderedDict)
    """The step that trained each recent group (its first record), for an episode's link to it."""
    evals: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    """The recent evaluations' results, by their run id (the eval panel: per policy version, per task;
    the first ``TASKS_SHOWN`` tasks)."""
    learn_runs: OrderedDict[str, dict[str, tuple[EvalReport, int]]] = field(default_factory=OrderedDict)
    """The recent ``learn`` runs' stage reports (blind baseline, base, SFT, GRPO; their first
    ``TASKS_SHOWN`` tasks, and how many they have), by learn run, then stage: the learning panel,
    ``learn``'s closing table (``cua_stream.learn_table``)."""
    retrains: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    """The recent retrains (their run, the run they retrained, their figures by step): kept out of the
    live steps, whose groups they train again (a second series on the charts, counted stale twice)."""
    latest_version: int = 0
    records: int = 0

    # -- folding ------------------------------------------------------------------------------------

    def add(self, event: object) -> None:
        self.records += 1
        match event:
            case WorkRequest():
                _bounded(self.group_versions, event.group_id, event.policy_version)
                if (trained := self.trained_unmatched.pop(event.group_id, None)) is not None:
                    self._stale(trained, event.policy_version)
                task = clip(event.task.name)
                self._episode(event.episode_id, event.group_id).task = task
                _bounded(self.group_tasks, event.group_id, task)
            case CallRecord():
                ep = self._episode(event.episode_id, event.group_id)
                ep.calls.append(
                    Call(
                        seq=event.seq, kind=event.kind.value, attempt=event.attempt,
                        completion_ids=list(event.completion_ids), finish_reason=clip(event.finish_reason),
                        images=[i.sha256 for i in event.images], policy_version=event.policy_version,
                        engine_ms=event.engine_ms, gateway_ms=event.gateway_ms,
                    )
                )  # fmt: skip
                ep.calls.sort(key=lambda c: (c.attempt, c.seq))
                self.latency.append((event.engine_ms, event.gateway_ms))
            case OutcomeEvent():
                ep = self._episode(event.episode_id, event.group_id)
                ep.task = clip(event.task)
                ep.outcome = {
                    "attempt": event.attempt,
                    "rewards": {clip(k): v for k, v in list(event.rewards.items())[:REASONS_SHOWN]},
                    "exception": clip(event.exception.type) if event.exception else None,
                    "early_termination_reason": clip(event.early_termination_reason),
                    "n_turns": event.n_turns,
                    "seconds": round(event.finished_at - event.started_at, 2),
                }
                if math.isfinite(event.finished_at):  # a record's time is whatever its writer put there
                    self.finished_per_minute[int(event.finished_at // 60)] += 1
            case ScoreEvent():
                verdict = event.verdict
                label = (
                    f"discard ({verdict.reason})"
                    if isinstance(verdict, Discard)
                    else f"reward {verdict.value:g} ({verdict.reason})"
                )
                label = count(self.verdicts, clip(label))
                ep = self._episode(event.episode_id, event.group_id)
                ep.verdict, ep.reward = label, None if isinstance(verdict, Discard) else verdict.value
                if ep.reward is not None:
                    rewards = self.group_rewards.get(event.group_id) or []
                    _bounded(self.group_rewards, event.group_id, [*rewards, ep.reward])
            case TrainStep(retrain_of=source) if source:
                self._retrained(event)
            case TrainStep():
                m = event.metrics
                self.steps.append(
                    {
                        "run_id": event.run_id,
                        "step": event.step,
                        "policy_version": event.policy_version,
                        "mean_reward": m.get("mean_reward", 0.0),
                        "logprob_gap": m.get("logprob_gap", 0.0),
                        "grad_norm": m.get("grad_norm", 0.0),
                        "loss": event.loss,  # with kl and clip_fraction: beside a retrain of the step
                        "kl": m.get("kl"),
                        "clip_fraction": m.get("clip_fraction"),
                        "episodes": event.n_episodes,
                        "finished_at": event.finished_at,
                        "group_ids": list(event.group_ids),
                    }
                )
                for group_id in event.group_ids:
                    if group_id not in self.group_steps:  # a re-published step is the same step
                        _bounded(self.group_steps, group_id, event)
                    if (issued := self.group_versions.get(group_id)) is not None:
                        self._stale(event.policy_version, issued)
                    else:
                        _bounded(self.trained_unmatched, group_id, event.policy_version)
            case GroupDropped():
                count(self.drops, clip(event.reason))
            case PolicyVersion():
                self.latest_version = max(self.latest_version, event.version)
            case DeadLetter():
                count(self.dead_letters, clip(event.reason))
            case EvalReport():
                self.evals[event.run_id] = eval_row(event)
                self.evals.move_to_end(event.run_id)
                while len(self.evals) > EVALS_KEPT:
                    self.evals.popitem(last=False)
                if (stage := stage_of(event)) is not None:
                    run, name = stage
                    kept = (
                        msgspec.structs.replace(event, tasks=shown_tasks(event.tasks)),
                        _n_tasks(event.tasks),
                    )
                    _bounded(
                        self.learn_runs, run, {**self.learn_runs.get(run, {}), name: kept}, LEARN_RUNS_KEPT
                    )

    def _retrained(self, step: TrainStep) -> None:
        run = self.retrains.get(step.run_id) or {
            "run_id": clip(step.run_id),
            "retrain_of": clip(step.retrain_of),
            "steps": {},
        }
        figures = {"loss": step.loss} | {
            k: step.metrics.get(k) for k in ("kl", "clip_fraction", "grad_norm", "logprob_gap")
        }
        if len(run["steps"]) < RETRAIN_STEPS_KEPT:
            run["steps"].setdefault(step.step, figures)  # a re-published step is the same step
        _bounded(self.retrains, step.run_id, run, RETRAINS_KEPT)

    def _stale(self, trained_version: int, issued_version: int) -> None:
        """A group trained into ``trained_version`` (by weights one version older) from work issued under
        ``issued_version``: how many versions its rollouts lagged."""
        count(self.staleness, staleness(trained_from(trained_version), issued_version))

    def _episode(self, episode_id: str, group_id: str) -> Episode:
        ep = self.episodes.get(episode_id)
        if ep is None:
            ep = self.episodes[episode_id] = Episode(episode_id, group_id)
            while len(self.episodes) > EPISODES_KEPT:
                self.episodes.popitem(last=False)
        return ep

    # -- what the page reads ----------------------------------------------------------------------------

    def trained_in(self, episode_id: str) -> dict[str, Any] | None:
        """The step that trained ``episode_id`` (its run, number and the attempt trained); None if none
        has (yet), or its group's step trained the group's other episodes only (a discarded one)."""
        ep = self.episodes.get(episode_id)
        step = self.group_steps.get(ep.group_id) if ep else None
        if step is None or (step.attempts and episode_id not in step.attempts):
            return None
        return {"run_id": step.run_id, "step": step.step, "attempt": step.attempts.get(episode_id)}

    def by_task(self) -> dict[str, dict[str, float]]:
        """Per task, over the recent episodes: how many were scored, their mean reward, the discards."""
        return _by_task(list(self.episodes.values()))

    def step_by_task(self, group_ids: list[str]) -> dict[str, float]:
        """A step's mean reward per task, over its groups whose task and rewards are known."""
        rewards: dict[str, list[float]] = {}
        for group in group_ids:
            if group in self.group_tasks and self.group_rewards.get(group):
                rewards.setdefault(self.group_tasks[group], []).extend(self.group_rewards[group])
        return {task: round(sum(v) / len(v), 3) for task, v in sorted(rewards.items())}

    def learn_tables(self) -> list[dict[str, Any]]:
        """The last ``LEARN_RUNS_SHOWN`` learn runs (by their newest report), newest first, each with
        ``learn``'s closing table: per task, success of the blind baseline, base, after SFT, after GRPO."""
        runs = sorted(self.learn_runs.items(), key=lambda kv: max(r.created_at for r, _ in kv[1].values()))
        return [learn_table(stages) | {"run": run} for run, stages in reversed(runs[-LEARN_RUNS_SHOWN:])]

    def summary(self) -> dict[str, Any]:
        engine = sorted(e for e, _ in self.latency)
        gateway = sorted(g for _, g in self.latency)
        minutes = sorted(self.finished_per_minute.items())[-30:]
        return {
            "records": self.records,
            "latest_version": self.latest_version,
            "steps": [
                _step_row(step, self.step_by_task(step["group_ids"]))
                for step in sorted(self.steps, key=lambda s: s["step"])[-200:]
            ],
            "verdicts": dict(self.verdicts.most_common(REASONS_SHOWN)),
            "drops": dict(self.drops.most_common(REASONS_SHOWN)),
            "dead_letters": dict(self.dead_letters.most_common(REASONS_SHOWN)),
            "staleness": {
                str(k): v for k, v in sorted(self.staleness.most_common(REASONS_SHOWN), key=_lag_order)
            },
            "not_shown": {
                name: _not_shown(counts)
                for name, counts in (("verdicts", self.verdicts), ("drops", self.drops),
                                     ("dead_letters", self.dead_letters), ("staleness", self.staleness))
                if len(counts) > REASONS_SHOWN
            },
            "throughput": [{"minute": m, "episodes": n} for m, n in minutes],
            "latency_ms": {
                "engine_p50": round(quantile(engine, 0.5), 1), "engine_p95": round(quantile(engine, 0.95), 1),
                "gateway_p50": round(quantile(gateway, 0.5), 1), "gateway_p95": round(quantile(gateway, 0.95), 1),
                "calls": len(engine),
            },
            "tasks": self.by_task(),
            "evals": sorted(self.evals.values(), key=lambda e: (e["created_at"], e["run_id"]))[-20:],
            "learn": self.learn_tables(),
            "retrains": [
                {**r, "steps": [{"step": k, **f} for k, f in sorted(r["steps"].items())]}
                for r in self.retrains.values()
            ],
            "episodes": [
                {"episode_id": e.episode_id, "task": e.task, "calls": len(e.calls), "verdict": e.verdict}
                for e in reversed(self.episodes.values())
            ][:50],
        }  # fmt: skip


def eval_row(report: EvalReport) -> dict[str, Any]:
    """An evaluation as the eval panel shows it: what was evaluated, and per task its success rate with
    the 95 % interval, pass@k and how many episodes counted."""
    version = f"v{report.policy_version}" if report.policy_version is not None else ""
    return {
        "run_id": report.run_id,
        "policy": clip(f"{report.of_run} {version}".strip() or report.policy),
        "created_at": report.created_at,
        "lag_s": (
            round(report.created_at - report.version_published_at, 1)
            if report.version_published_at is not None
            else None
        ),
        "samples": report.samples,
        "layouts": report.layouts,
        "tasks_total": _n_tasks(report.tasks),
        "tasks": [
            {
                "task": clip(t.task),
                "rate": round(t.successes / t.scored, 3) if t.scored else None,
                "low": round(t.low, 3),
                "high": round(t.high, 3),
                "scored": t.scored,
                "episodes": t.episodes,
                "pass_at": {str(k): round(v, 3) for k, v in sorted(t.pass_at.items())[:REASONS_SHOWN]},
            }
            for t in shown_tasks(report.tasks)
        ],
    }


def shown_tasks(tasks: Sequence[EvalTask]) -> tuple[EvalTask, ...]:
    """The first ``TASKS_SHOWN`` tasks of an evaluation, and its ``overall``."""
    named = itertools.islice((t for t in tasks if t.task != OVERALL), TASKS_SHOWN)
    return (*named, *(t for t in tasks if t.task == OVERALL))


def _n_tasks(tasks: Sequence[EvalTask]) -> int:
    return sum(t.task != OVERALL for t in tasks)


def learn_table(stages: Mapping[str, tuple[EvalReport, int]]) -> dict[str, Any]:
    """A learn run's closing table from its stages' (shown) reports: its first ``TASKS_SHOWN`` rows and
    ``overall``, and how many tasks its stages have (``tasks_total``)."""
    rows = stage_table({stage: report for stage, (report, _) in stages.items()})
    named = [r for r in rows if r.task != OVERALL]
    total = max([len(named), *(n for _, n in stages.values())])
    return {
        "rows": rows_json([*named[:TASKS_SHOWN], *(r for r in rows if r.task == OVERALL)]),
        "tasks_total": total,
    }


def clip[T: (str, str | None)](text: T) -> T:
    """A record's string as the board keeps it: at most ``TEXT_KEPT`` characters."""
    return text if text is None or len(text) <= TEXT_KEPT else f"{text[: TEXT_KEPT - 1]}…"


def count[K](counts: Counter[K | str], key: K | str) -> K | str:
    """Count ``key`` in ``counts`` (the key counted): a new key once ``REASONS_KEPT`` are counted is ``OTHER``
    (records name reasons freely: a million distinct ones must not take a million entries)."""
    if key not in counts and len(counts) >= REASONS_KEPT:
        key = OTHER
    counts[key] += 1
    return key


def _lag_order(item: tuple[int | str, int]) -> tuple[bool, int]:
    lag = item[0]
    return (True, 0) if isinstance(lag, str) else (False, lag)  # OTHER after every lag


def _not_shown(counts: Counter[Any]) -> dict[str, int]:
    hidden = counts.most_common()[REASONS_SHOWN:]
    return {"reasons": len(hidden), "records": sum(n for _, n in hidden)}


def _step_row(step: dict[str, Any], by_task: dict[str, float]) -> dict[str, Any]:
    """A step as the page gets it: its figures and its first ``STEP_TASKS_SHOWN`` tasks' rewards (not its
    group ids: a step record may name thousands)."""
    shown = dict(itertools.islice(by_task.items(), STEP_TASKS_SHOWN))
    return {
        **{k: v for k, v in step.items() if k != "group_ids"},
        "by_task": shown,
        "tasks_total": len(by_task),
    }


def _bounded[V](table: OrderedDict[str, V], key: str, value: V, kept: int = GROUP_VERSIONS_KEPT) -> None:
    """Set ``key`` as the newest entry of ``table``, forgetting the oldest past ``kept``."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > kept:
        table.popitem(last=False)


def _by_task(episodes: list[Episode]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for task in sorted({e.task for e in episodes if e.verdict}):
        scored = [e for e in episodes if e.task == task and e.verdict]
        rewards = [e.reward for e in scored if e.reward is not None]
        out[task or "?"] = {
            "scored": len(scored),
            "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else 0.0,
            "discarded": len(scored) - len(rewards),
        }
    return out
