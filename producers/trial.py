"""The real episode: a Harbor ``Trial`` of computer-1 (``Qwen3VLComputer1`` through ``bind_computer1``)
in the producer's environment (the local desktop, Docker, or any Harbor environment type:
``producers.environments``), talking to its gateway session; its outcome from the ``TrialResult``."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from cua_stream.binding.computer1 import Computer1Params, ServedModel, bind_computer1
from cua_stream.config import environ
from cua_stream.events import TaskRef
from cua_stream.identity import trial_name
from producers.config import ProducerConfig
from producers.environments import environment_config
from producers.episode import EpisodeResult, EpisodeRun
from producers.outcome import outcome_from_trial


def task_path(task: TaskRef) -> Path:
    """The task directory of ``task``: its own path, resolved as admission resolved it to check it lies
    under a task root (``producers.admission``), else a bundled or MiniWoB++ task by name. A directory
    exported from another MiniWoB++ version than this host's is refused (TaskVersionMismatch)."""
    from cua_stream.tasks import task_dir
    from cua_stream.tasks.miniwob import is_miniwob
    from cua_stream.tasks.miniwob.export import check_exported, exported_task_dir

    if task.path:
        path = Path(os.path.realpath(task.path))
        check_exported(path)
        return path
    return exported_task_dir(task.name) if is_miniwob(task.name) else task_dir(task.name)


def follow_process_log_level() -> None:
    """Harbor pins its logger to DEBUG when imported (every trial's per-turn chatter on the console):
    make it follow the process's level instead, at most as chatty as INFO."""
    from harbor.utils.logger import logger

    logger.setLevel(max(logging.getLogger().getEffectiveLevel(), logging.INFO))


@functools.cache
def start_page_of(path: Path) -> tuple[str | None, str | None]:
    """The page computer-1 opens first and the command that says it is drawn (``[metadata] start_url``
    and ``ready_probe`` in the task's ``task.toml``), read once per task directory, not per episode."""
    from harbor.models.task.task import Task

    meta = Task(path).config.metadata
    url, probe = meta.get("start_url"), meta.get("ready_probe")
    return (url if isinstance(url, str) else None), (probe if isinstance(probe, str) else None)


class TrialRunner:
    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        follow_process_log_level()

    def trial_config(self, episode: EpisodeRun):  # -> harbor TrialConfig
        from harbor.models.trial.config import TaskConfig, TrialConfig

        cfg, work = self.config, episode.work
        path = task_path(work.task)
        budget = min(cfg.max_input_tokens or episode.context_length, episode.context_length)
        start_url, ready_probe = start_page_of(path)
        params = Computer1Params(
            session_url=episode.session_url,
            session_key=episode.session_key,
            temperature=float(work.sampling.get("temperature", 1.0)),
            model=ServedModel(name=cfg.model_name, max_input_tokens=budget),
            max_turns=cfg.max_turns,
            max_parse_errors=cfg.max_parse_errors,
            desktop_width=cfg.desktop_width,
            desktop_height=cfg.desktop_height,
            agent_timeout_sec=cfg.agent_timeout_s,
            start_url=start_url,
            ready_probe=ready_probe,
        )
        return TrialConfig(
            task=TaskConfig(path=path),
            trial_name=trial_name(episode.work, episode.attempt),
            trials_dir=cfg.trials_path,
            agent=bind_computer1(params, environ()).trial_agent_config(),
            environment=environment_config(cfg, episode, self.overlay_file(episode)),
        )

    def overlay_file(self, episode: EpisodeRun) -> Path:
        """Where the episode's compose overlay goes (docker), beside Harbor's trial directories."""
        return (
            self.config.trials_path
            / ".environments"
            / f"{trial_name(episode.work, episode.attempt)}.compose.json"
        )

    async def run(self, episode: EpisodeRun) -> EpisodeResult:
        from harbor.trial.trial import Trial

        work = episode.work
        try:
            result = await (await Trial.create(self.trial_config(episode))).run()
        finally:
            self.overlay_file(episode).unlink(missing_ok=True)
        setup = result.environment_setup
        env_start = (
            (setup.finished_at - setup.started_at).total_seconds()
            if setup is not None and setup.started_at is not None and setup.finished_at is not None
            else None
        )
        outcome = outcome_from_trial(result, work, episode.attempt)
        return EpisodeResult(outcome, env_start)
