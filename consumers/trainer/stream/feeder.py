"""The work the trainer issues: one GRPO group per index, its episodes named from it. Pure.

The names are ``cua_stream.identity``'s: group ``k`` of run ``r`` is ``group_id_of(r, k)``, its episodes
``episode_id_of(group, i)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from cua_stream.events import TaskRef, WorkRequest
from cua_stream.identity import episode_id_of, group_id_of, instance_group_id


def sampling_of(
    temperature: float, max_new_tokens: int, *, top_k: int = -1, top_p: float = 1.0, min_p: float = 0.0
) -> dict[str, Any]:
    """A work request's sampling parameters in SGLang's names; the filters only when on (-1, 1, 0: off)."""
    out: dict[str, Any] = {"temperature": temperature, "max_new_tokens": max_new_tokens}
    if top_k != -1:
        out["top_k"] = top_k
    if top_p != 1.0:
        out["top_p"] = top_p
    if min_p != 0.0:
        out["min_p"] = min_p
    return out


def work_for_group(
    run_id: str,
    index: int,
    *,
    tasks: Sequence[str | TaskRef],
    group_size: int,
    policy_version: int,
    sampling: dict[str, Any],
    now: float,
) -> list[WorkRequest]:
    """The work requests of group ``index``: ``group_size`` episodes of task ``tasks[index % len]`` (a
    bundled task's name, or a resolved ``TaskRef``: ``cua_stream.tasks.task_ref``)."""
    group_id = group_id_of(run_id, index)
    task = tasks[index % len(tasks)]
    task = task if isinstance(task, TaskRef) else TaskRef(name=task)
    return [
        WorkRequest(
            run_id=run_id,
            group_id=group_id,
            episode_id=episode_id_of(group_id, i),
            task=task,
            sample_index=i,
            group_size=group_size,
            policy_version=policy_version,
            created_at=now,
            sampling=sampling,
        )
        for i in range(group_size)
    ]


def instance_work(
    run_id: str,
    tasks: Sequence[str | TaskRef],
    seeds: Sequence[int],
    *,
    sampling: dict[str, Any],
    now: float,
    teacher: str | None = None,
    samples: int = 1,
) -> list[WorkRequest]:
    """``samples`` episodes per task instance (task and layout seed), one group per instance (no group
    baseline: these are demonstrations, with ``teacher`` forcing the replies, or evaluations, whose
    samples of one instance give pass@k)."""
    refs = [task if isinstance(task, TaskRef) else TaskRef(name=task) for task in tasks]
    return [
        WorkRequest(
            run_id=run_id,
            group_id=instance_group_id(run_id, task.name, seed),
            episode_id=episode_id_of(instance_group_id(run_id, task.name, seed), i),
            task=task,
            sample_index=i,
            group_size=samples,
            policy_version=0,
            created_at=now,
            sampling=sampling,
            seed=seed,
            teacher=teacher,
        )
        for seed in seeds
        for task in refs
        for i in range(samples)
    ]


ORACLE = "oracle"
"""The bundled tasks' scripted solver, the teacher of demonstrations."""
DEMONSTRATION_SAMPLING = {"temperature": 1.0, "max_new_tokens": 256}
"""The oracle's replies are ~40-70 tokens of computer-1 JSON; the logprobs recorded are at 1.0."""


def demonstration_work(
    run_id: str, tasks: Sequence[str], seeds: Sequence[int], *, now: float
) -> list[WorkRequest]:
    """The oracle's demonstrations: one per task and layout seed."""
    return instance_work(run_id, tasks, seeds, sampling=dict(DEMONSTRATION_SAMPLING), now=now, teacher=ORACLE)


def missing_work(issued: Iterable[WorkRequest], group_size: int) -> list[WorkRequest]:
    """The episodes a crash kept off the work topic: a trainer killed while it published a group's
    requests (one by one, each durable) leaves only the first few; each missing one is its siblings' copy
    under its own index (same task, policy version, sampling and issue time), in index order."""
    by_group: dict[str, dict[int, WorkRequest]] = {}
    for work in issued:
        by_group.setdefault(work.group_id, {})[work.sample_index] = work
    return [
        msgspec.structs.replace(
            sibling, episode_id=episode_id_of(group_id, i), sample_index=i, group_size=group_size, attempt=0
        )
        for group_id, present in sorted(by_group.items())
        for sibling in [next(iter(present.values()))]
        for i in range(group_size)
        if i not in present
    ]
