"""The embedded local demo's plan: which work it issues, and the tiny model it serves.

The demo runs the real path: work requests on the work topic, the rollout producer running each as a
Harbor computer-1 trial on the local desktop (a bundled task, its layout drawn from the group's seed),
through the session gateway and the CPU engine (a tiny random Qwen3-VL), and the exactly-once scorer.
A random policy earns 0 on every task: a reply cut at the token cap ends its episode with reward 0
(``token_cap``), the others run to the turn limit and the verifier says 0 (``ok``). The tasks' own oracle
(``cua_stream.tasks.policies``) shows they can be solved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from consumers.trainer.feeder import work_for_group
from cua_stream.config import cache_dir
from cua_stream.events import WorkRequest
from cua_stream.tasks import TASKS

MODEL_DIR_NAME = "tiny-qwen3-vl-v1"
TEMPERATURE = 1.0


@dataclass(frozen=True)
class DemoPlan:
    groups: int = 2
    group_size: int = 2
    turns: int = 3
    concurrency: int = 2
    max_new_tokens: int = 8
    """A random policy's reply often runs past a few tokens: those episodes end at the token cap."""


def tiny_model_dir() -> Path:
    """The demo's model, built once (offline, a few seconds) into the user cache."""
    path = cache_dir() / "models" / MODEL_DIR_NAME
    if not (path / "config.json").exists():
        from cua_stream.models.tiny import make_tiny_model

        make_tiny_model(path)
    return path


def demo_work(run_id: str, plan: DemoPlan) -> list[WorkRequest]:
    """``plan.groups`` GRPO groups, one bundled task each (in order), ``plan.group_size`` episodes apiece."""
    sampling = {"temperature": TEMPERATURE, "max_new_tokens": plan.max_new_tokens}
    return [
        work
        for g in range(plan.groups)
        for work in work_for_group(
            run_id,
            g,
            tasks=list(TASKS),
            group_size=plan.group_size,
            policy_version=0,
            sampling=sampling,
            now=time.time(),
        )
    ]
