"""An evaluation's results file: what was evaluated and every episode's task, layout, verdict, turns and
time. A file format of its own (versioned), not a record on a topic. The summaries are not stored: they
are recomputed from the episodes (``cua_stream.evaluation.stats``), so a comparison needs only this."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import msgspec

from cua_stream.errors import ConfigError
from cua_stream.events import Discard, OutcomeEvent, Reward, ScoreEvent, WorkRequest
from cua_stream.identity import layout_seed

SCHEMA_VERSION = 1
Verdict = Literal["reward", "discard", "unscored"]


class EvalEpisode(msgspec.Struct, frozen=True, kw_only=True):
    """One evaluated episode: sample ``sample`` of task ``task`` on layout ``seed``."""

    episode_id: str
    task: str
    seed: int
    sample: int
    verdict: Verdict
    """``reward`` (scored), ``discard`` (not the policy's doing: left out of the rates) or ``unscored``
    (no score in time)."""
    reward: float | None = None
    reason: str = ""
    """The scorer's reason: ``ok`` for a clean finish, else why it scored 0 or was discarded."""
    turns: int | None = None
    seconds: float | None = None


class EvalResults(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    policy: str
    """A scripted policy's name (``oracle``) or the model directory evaluated."""
    environment: str
    samples: int
    """Episodes per task instance (task and layout): the k of pass@k."""
    seeds: list[int]
    tasks: list[str]
    created_at: float
    episodes: list[EvalEpisode]


def episodes_of(
    work: Iterable[WorkRequest],
    scores: Mapping[str, ScoreEvent],
    outcomes: Mapping[tuple[str, int], OutcomeEvent],
) -> list[EvalEpisode]:
    """Each work request's episode: its score's verdict, and the turns and time of the scored attempt's
    outcome (``outcomes`` by episode id and attempt; a retried episode's earlier attempts do not count)."""
    out = []
    for w in work:
        score = scores.get(w.episode_id)
        outcome = outcomes.get((w.episode_id, score.attempt)) if score else None
        verdict = score.verdict if score else None
        out.append(
            EvalEpisode(
                episode_id=w.episode_id,
                task=w.task.name,
                seed=layout_seed(w),
                sample=w.sample_index,
                verdict=_kind(verdict),
                reward=verdict.value if isinstance(verdict, Reward) else None,
                reason=verdict.reason if verdict is not None else "",
                turns=outcome.n_turns if outcome else None,
                seconds=outcome.finished_at - outcome.started_at if outcome else None,
            )
        )
    return out


def _kind(verdict: Reward | Discard | None) -> Verdict:
    return "unscored" if verdict is None else "reward" if isinstance(verdict, Reward) else "discard"


def save(path: Path, results: EvalResults) -> None:
    """Write a results file (its folder made if need be; ConfigError naming the file when it cannot be)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(msgspec.json.format(msgspec.json.encode(results)) + b"\n")
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the results ({e.strerror})") from None


def load(path: Path) -> EvalResults:
    """A results file (ConfigError naming the file when it is not one this version reads)."""
    try:
        results = msgspec.json.decode(path.read_bytes(), type=EvalResults)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ConfigError(f"{path}: not a cua-stream eval results file ({e})") from None
    if results.schema_version != SCHEMA_VERSION:
        raise ConfigError(
            f"{path}: results schema {results.schema_version}; this version reads {SCHEMA_VERSION}"
        )
    return results
