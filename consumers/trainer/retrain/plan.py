"""``cua-stream retrain``'s decisions, pure: which recorded steps, which settings (the source run's from
its log, with the ``--set`` overrides checked and applied), which starting weights. The command's I/O
(reading the log, preparing the checkpoint directory, training) is ``consumers/trainer/retrain/prepare.py``.

A retrain trains a new policy on the source run's recorded batches, each step the groups its
``TrainStep`` lists, judged as they were: the settings that decide which samples a step holds are the
source run's (``SAMPLE_RULES``), the ones that only decide how the step trains on them may change.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from consumers.trainer.config import TrainerConfig
from consumers.trainer.retrain.compare import COMPARED, figure
from consumers.trainer.retrain.settings import LEFT_OUT
from consumers.trainer.retrain.settings_diff import SET_BY_RETRAIN
from cua_stream.events import TrainStep

SAMPLE_RULES = (
    "max_staleness",
    "on_stale",
    "on_discard",
    "min_survivors",
    "filter_zero_variance",
    "max_seq_len",
)
"""Settings that decide which samples a step holds (staleness bound, discard policy, length cap): a retrain
trains the recorded steps' samples as they were judged, so it keeps its source run's; unless it rejudges
(``--rejudge``): its groups decided again under them, a group they drop left out of its step."""
FIXED: dict[str, str] = {
    "run_id": "give it as --run-id",
    "retrain_of": "give it as --from",
    "replay_batches_from": "give it as --batches-from",
    "checkpoint_dir": "give it as --checkpoint-dir",
    "replay_from_step": "give it as --steps",
    "replay_to_step": "give it as --steps",
    "rejudge": "give it as --rejudge",
    "group_size": "a recorded group holds its run's number of episodes",
    "max_steps": "give the steps as --steps",
    "tasks": "a retrain issues no work",
    "groups_per_step": "each step trains the groups its record lists",
    "group_timeout_s": "every recorded group is complete on the log",
    **dict.fromkeys(("max_new_tokens", "top_k", "top_p", "min_p"), "a retrain samples no episode"),
    **dict.fromkeys(
        ("engine_url", "gateway_url", "weight_update", "drain_timeout_s"), "a retrain loads no engine"
    ),
}
"""Settings a ``--set`` may not change, and why."""
KNOWN = tuple(f for f in TrainerConfig.__struct_fields__ if f not in LEFT_OUT)


def parse_override(item: str, *, rejudge: bool = False) -> tuple[str, Any]:
    """One ``--set trainer.KEY=VALUE`` as (KEY, value): VALUE read as JSON where it is JSON (numbers,
    ``true``, ``null``, lists), else as text. ValueError, one line naming the key, for a key that is not
    a trainer setting (with the closest names), one a retrain may not change, or a bad form."""
    key, sep, raw = item.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or section != "trainer" or not dot or not name:
        raise ValueError(f"--set {item!r}: expected trainer.KEY=VALUE (e.g. trainer.kl_coef=0.3)")
    if name not in KNOWN:
        near = difflib.get_close_matches(name, KNOWN, n=3, cutoff=0.5)
        hint = f"; closest: {', '.join(f'trainer.{n}' for n in near)}" if near else ""
        raise ValueError(f"--set trainer.{name}: no such trainer setting{hint}")
    if name in FIXED:
        raise ValueError(f"--set trainer.{name}: not a retrain's to change ({FIXED[name]})")
    if name in SAMPLE_RULES and not rejudge:
        raise ValueError(
            f"--set trainer.{name}: it decides which samples a step holds; a retrain trains the recorded "
            "steps' samples as they were judged (--rejudge: decide them again under it)"
        )
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return name, value


def retrain_settings(
    source: Mapping[str, Any],
    overrides: Mapping[str, Any],
    *,
    source_run: str,
    run_id: str,
    batches_from: str,
    steps: tuple[int, int],
    checkpoint_dir: str,
    rejudge: bool = False,
) -> dict[str, Any]:
    """The retrain's ``[trainer]`` section: its source run's recorded settings, what a retrain sets
    itself, the overrides, and where it reads the recorded steps and keeps its checkpoints."""
    return {
        **source,
        **SET_BY_RETRAIN,
        **overrides,
        "run_id": run_id,
        "retrain_of": source_run,
        "replay_batches_from": batches_from,
        "replay_from_step": steps[0],
        "replay_to_step": steps[1],
        "checkpoint_dir": checkpoint_dir,
        "rejudge": rejudge,
    }


def unknown_settings(source: Mapping[str, Any]) -> list[str]:
    """Recorded settings this version's trainer does not have (a newer trainer wrote them): a retrain
    cannot honour them, so it refuses rather than train under other settings than it shows."""
    return sorted(set(source) - set(KNOWN))


def change_lines(source: Mapping[str, Any], changed: Mapping[str, Any]) -> list[str]:
    """One line per changed setting: ``trainer.kl_coef  0.0 → 0.3``."""
    width = max((len(k) for k in changed), default=0)
    return [
        f"trainer.{k:<{width}}  {json.dumps(source.get(k))} → {json.dumps(v)}" for k, v in changed.items()
    ]


def start_of(text: str, first: int) -> int | str:
    """``--start``: a version of the source run (``vN``: its weights after step N), a path (a trainer
    checkpoint directory or a model directory), or by default the weights the first step retrained
    started from (v``first - 1``). A version as an int, a path as text."""
    if not text:
        return first - 1
    if m := re.fullmatch(r"v(\d+)", text.strip()):
        return int(m[1])
    return text


def steps_note(first: int, last: int, groups: Sequence[Sequence[str]]) -> str:
    """``steps 1..3 (3 steps, 6 groups)``."""
    n = last - first + 1
    return f"steps {first}..{last} ({n} step{'s' * (n != 1)}, {sum(len(g) for g in groups)} groups)"


def step_line(mine: TrainStep, source: TrainStep | None) -> str:
    """A retrained step beside the source run's record of it: ``= r1`` where a figure is the same bit
    for bit, the source's value where it differs."""
    parts = []
    for name in COMPARED:
        value, theirs = figure(mine, name), figure(source, name) if source is not None else None
        if value is None:
            continue
        same = "= " + source.run_id if source is not None and theirs == value else None
        other = f"{source.run_id} {theirs:.6g}" if source is not None and theirs is not None else "-"
        parts.append(f"{name} {value:.6g} ({same or other})")
    left_out = [g for g in source.group_ids if g not in mine.group_ids] if source is not None else []
    return (
        f"step {mine.step}: " + "  ".join(parts) + (f"  left out: {', '.join(left_out)}" if left_out else "")
    )
