"""An episode's identity, in one place. Pure.

An episode is named by its run, its group and its own id, and each run of its work request by an
``attempt``. The names are derived, never random: group ``k`` of run ``r`` is ``r-g00000k`` and its
episodes ``r-g00000k-e<i>``, so a restarted trainer finds how far it got by reading its own work topic,
and every dedup by episode id holds across restarts. Here are the one way to make those names and to
read an index back, the one rule every entry point checks ids by (the gateway's sessions and the bus's
decoder alike), the seed of the task layout an episode plays, the name of an attempt's trial directory,
and the outcome record an attempt starts from.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from cua_stream.events import OutcomeEvent, WorkRequest

ID_FIELDS = ("run_id", "group_id", "episode_id")
EVAL_RUN_PREFIX = "eval-"
"""Evaluation runs' ids start with this, and no trainer's may: evaluation work is never trained, by
construction (a trainer joins only its own run's records)."""
MAX_ID_LENGTH = 512


def is_eval_run(run_id: str) -> bool:
    return run_id.startswith(EVAL_RUN_PREFIX)


def group_id_of(run_id: str, index: int) -> str:
    """The id of the trainer's group ``index`` of run ``run_id``."""
    return f"{run_id}-g{index:06d}"


def index_of(run_id: str, group_id: str) -> int | None:
    """The index of ``group_id`` if run ``run_id``'s trainer issued it (``group_id_of`` read back)."""
    prefix = f"{run_id}-g"
    tail = group_id.removeprefix(prefix)
    return int(tail) if group_id.startswith(prefix) and tail.isdigit() else None


def instance_group_id(run_id: str, task: str, seed: int) -> str:
    """The id of the group of one task instance (a task at a layout seed: demonstrations, evaluations)."""
    return f"{run_id}-{task}-s{seed}"


def episode_id_of(group_id: str, sample_index: int) -> str:
    """The id of episode ``sample_index`` of ``group_id``."""
    return f"{group_id}-e{sample_index}"


def identity_problem(run_id: str, group_id: str, episode_id: str) -> str | None:
    """What is wrong with an episode's ids, or None: each is required, printable, and at most
    ``MAX_ID_LENGTH`` characters (ids go into keys, headers, file names and log lines)."""
    if _fine(run_id) and _fine(group_id) and _fine(episode_id):
        return None  # the common case, with no loop: every record is checked twice (produced, consumed)
    name, value = next(
        (n, v) for n, v in zip(ID_FIELDS, (run_id, group_id, episode_id), strict=True) if not _fine(v)
    )
    return f"{name}: required, printable, at most {MAX_ID_LENGTH} characters (got {value[:80]!r})"


def _fine(value: str) -> bool:
    return 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()


def layout_seed(work: WorkRequest) -> int:
    """The seed of ``work``'s task layout: its own, else a stable hash of its group (so a group's
    episodes see the same task instance)."""
    return work.seed if work.seed is not None else zlib.crc32(work.group_id.encode())


def trial_name(work: WorkRequest, attempt: int) -> str:
    """The directory name of one attempt of ``work`` (Harbor writes the trial's logs and result under
    it): its episode id and attempt, with anything but letters, digits, '.', '_' and '-' as '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{work.episode_id}.{attempt}")


def outcome_of(work: WorkRequest, attempt: int, **fields: Any) -> OutcomeEvent:
    """The outcome of ``attempt`` of ``work``: its identity, task and policy version from the work
    request; everything about how it ended from ``fields`` (``task`` may say the task's own name)."""
    fields.setdefault("task", work.task.name)
    return OutcomeEvent(
        run_id=work.run_id,
        group_id=work.group_id,
        episode_id=work.episode_id,
        attempt=attempt,
        policy_version=work.policy_version,
        **fields,
    )
