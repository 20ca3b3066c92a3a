"""Configuration of the rollout producer daemon (section ``producer``; env ``CUA_PRODUCER_<FIELD>``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from cua_stream.config import BusConfig, ConfigError, Secret, stage_config, state_dir
from cua_stream.events import TaskRef
from cua_stream.identity import EVAL_RUN_PREFIX, is_eval_run
from cua_stream.topics import EVAL_WORK, WORK, TopicSpec

OWN_ENVIRONMENTS = ("local-desktop", "scripted")
"""The environments cua-stream brings; any other name is one of Harbor's (``docker``, ``daytona``, ...)."""


class ProducerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A producer: which work it takes, how many episodes it runs at once, and how it runs them."""

    gateway_url: str = "http://127.0.0.1:8000"
    """The session gateway: one session per episode, its URL and key handed to the agent."""
    gateway_api_key: Secret | None = None
    """The gateway's API key (to open and close sessions); the agent only ever gets its session's key."""
    group_id: str = ""
    """Consumer group on the work topic, shared by every producer of a deployment's lane; empty:
    ``<topic prefix>.producers`` (the ``train`` lane) or ``<topic prefix>.eval-producers`` (``eval``)."""
    lane: Literal["train", "eval"] = "train"
    """Whose work it runs: ``train`` every run's but evaluations' (the work topic), ``eval`` only
    evaluations' (run ids ``eval-...``, the eval_work topic). Each lane reads its own topic in its own
    consumer group and passes over work of the other lane's runs found there, so an evaluation beside
    training runs on its own producers, gateway and engine, a training producer never plays an
    evaluation episode with training's weights (nor the reverse), and the evaluator's principal, which
    may write eval_work only, cannot have a training producer play anything."""
    runs: list[str] = []
    """Only these runs' work (a run id equal to one, or one followed by ``-``; in the ``eval`` lane after
    ``eval-``); empty: every run's of the lane. Such a producer reads in a consumer group of its own (see
    ``group``), so the lane's shared group never has work passed over, and work that a killed command left
    on the topic is not played by the next one's producers (a ``learn`` run played a stopped run's 80
    demonstrations before its own)."""
    task_roots: list[str] = []
    """Directories of Harbor tasks this producer may run besides the bundled and MiniWoB++ tasks (always
    allowed): a work record naming a task directory by a path that is not, with ``..`` and symlinks
    resolved, under one of them (or the bundled tasks) is answered ``not_run:task_not_allowed`` and never run. A user's
    own tasks (``trainer --tasks DIR``) are run only by producers that list their directory here (a
    command that runs its own producer, as ``eval`` does, adds the task directories it was given)."""
    concurrency: int = 2
    """Episodes run at once (each runs its own desktop: Xvfb, xfce4 and Chromium)."""
    max_starts_per_s: float = 100.0
    """Episodes started per second at most: a burst of work (a restart, a new run) is spread out instead of
    opening every session and desktop in the same instant (a thundering herd on the gateway, and the
    producer's own event loop stalls while hundreds of episodes take their first step together)."""
    environment: str = "local-desktop"
    """``local-desktop``: Harbor trials on per-episode namespaces of this host (needs root and the desktop
    packages: ``cua-stream desktop doctor``). ``scripted``: no Harbor, no desktop: episodes drawn from the
    seed talk to the gateway the way computer-1 does (for tests of the other daemons and benchmarks).
    Any other value is a Harbor environment type, made by Harbor's own factory: ``docker`` (each episode
    a container from its task's image: ``cua-stream containers start --build``), or ``daytona``,
    ``modal``, ``e2b``, ``runloop``, ``gke``, ... with their own options (``environment_options``) and
    credentials (their usual environment variables)."""
    environment_options: dict[str, Any] = {}
    """Harbor's options for that environment type (``EnvironmentConfig.kwargs``), e.g. a cloud's region."""
    container_network: Literal["none", "task"] = "none"
    """``docker`` only: ``none`` runs each episode's container with no network at all (computer-1 only
    execs into it; the bundled tasks serve their pages on its own loopback); ``task``: as the task's
    image and compose file say."""
    scripted_action_latency_s: float = 0.0
    """``scripted`` only: how long each 'action' takes (benchmarks and drain tests inject time here)."""
    scripted_long_fraction: float = 0.0
    """``scripted`` only, for benchmarks: the share of episodes that are long (drawn from each episode's
    seed, so a run is repeatable): their actions take ``scripted_long_factor`` times
    ``scripted_action_latency_s``, a long tail as computer-use has (a few slow tasks among many quick)."""
    scripted_long_factor: float = 1.0
    """``scripted`` only: how many times longer a long episode's actions take (1: none are)."""
    model_name: str = "qwen3-vl"
    """The name LiteLLM sends (the gateway serves one model whatever the name)."""
    max_input_tokens: int = 0
    """The prompt budget computer-1 compacts against; 0: the gateway's context length."""
    max_turns: int = 15
    """Turns (model calls) an episode may take before it ends unfinished."""
    max_parse_errors: int | None = None
    """End an episode after this many consecutive replies that do not parse (None: computer-1 asks again
    until ``max_turns``)."""
    desktop_width: int = 800
    """The episode desktop's width, in pixels (64..8192)."""
    desktop_height: int = 600
    """The episode desktop's height, in pixels (64..8192)."""
    agent_timeout_s: float = 600.0
    """How long one episode's agent may run (Harbor's agent timeout) before the trial stops it."""
    trials_dir: str = ""
    """Harbor's trial directories (logs, trajectories, results); empty: ``<state dir>/trials``."""
    max_staleness: int | None = None
    """Admission control: work issued under a policy version more than this behind the latest published
    one is not run (its outcome says ``not_run:stale``); None: run everything."""
    drain_timeout_s: float = 900.0
    """On the first SIGTERM, how long in-flight episodes may take to finish before they are cancelled
    (with ``abandoned`` outcomes); a second SIGTERM cancels at once."""
    metrics_host: str = "127.0.0.1"
    """The address the metrics page binds (with ``metrics_port``)."""
    metrics_port: int | None = None
    """Serve Prometheus text at http://<metrics_host>:<metrics_port>/metrics (0: any free port; None: off)."""
    progress: bool = False
    """Show a live progress table on the terminal (rich)."""
    bus: BusConfig = BusConfig()
    """Filled from the ``[bus]`` section (a producer's own section holds no bus settings)."""

    def __post_init__(self) -> None:
        if not self.gateway_url.startswith(("http://", "https://")):
            raise ConfigError(f"producer.gateway_url: expected an http(s) URL, got {self.gateway_url!r}")
        if self.environment not in OWN_ENVIRONMENTS and self.environment not in harbor_environments():
            raise ConfigError(
                f"producer.environment: {self.environment!r} is neither {' nor '.join(OWN_ENVIRONMENTS)} nor "
                f"a Harbor environment type ({', '.join(harbor_environments())})"
            )
        if self.scripted_action_latency_s < 0:
            raise ConfigError("producer.scripted_action_latency_s: must be >= 0")
        if not 0 <= self.scripted_long_fraction <= 1 or not self.scripted_long_factor >= 1:
            raise ConfigError(
                "producer.scripted_long_fraction: must be in [0, 1], producer.scripted_long_factor >= 1"
            )
        if self.max_starts_per_s <= 0:
            raise ConfigError("producer.max_starts_per_s: must be > 0")
        if self.concurrency < 1:
            raise ConfigError("producer.concurrency: must be >= 1")
        if self.max_turns < 1:
            raise ConfigError("producer.max_turns: must be >= 1")
        if self.max_parse_errors is not None and self.max_parse_errors < 1:
            raise ConfigError("producer.max_parse_errors: must be >= 1 (or unset)")
        if self.max_input_tokens < 0:
            raise ConfigError("producer.max_input_tokens: must be >= 0 (0: the gateway's context length)")
        for name in ("desktop_width", "desktop_height"):
            if not 64 <= getattr(self, name) <= 8192:
                raise ConfigError(f"producer.{name}: must be 64..8192 pixels")
        if self.agent_timeout_s <= 0 or self.drain_timeout_s < 0:
            raise ConfigError("producer.agent_timeout_s must be > 0 and producer.drain_timeout_s >= 0")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError("producer.max_staleness: must be >= 0")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError("producer.metrics_port: must be 0..65535")
        for root in self.task_roots:
            if not root or not Path(root).expanduser().is_dir():
                raise ConfigError(f"producer.task_roots: {root!r} is not a directory")
        if any(not run or run.startswith(EVAL_RUN_PREFIX) for run in self.runs):
            raise ConfigError(
                f"producer.runs: run ids, not empty and without {EVAL_RUN_PREFIX!r}: {self.runs}"
            )

    @property
    def group(self) -> str:
        lane = "producers" if self.lane == "train" else "eval-producers"
        shared = self.group_id or f"{self.bus.topic_prefix}.{lane}"
        return f"{shared}.{'.'.join(self.runs)}" if self.runs else shared

    def takes(self, run_id: str) -> bool:
        """Whether work of ``run_id`` is this producer's: its lane's, and of its ``runs`` when it has some."""
        if is_eval_run(run_id) != (self.lane == "eval"):
            return False
        own = run_id.removeprefix(EVAL_RUN_PREFIX) if self.lane == "eval" else run_id
        return not self.runs or any(own == run or own.startswith(f"{run}-") for run in self.runs)

    @property
    def work_topic(self) -> TopicSpec:
        """The topic this producer's lane reads its work from."""
        return WORK if self.lane == "train" else EVAL_WORK

    def task_root_paths(self) -> tuple[Path, ...]:
        """The directories tasks may run from, symlinks resolved: the bundled tasks, the MiniWoB++ suite as
        producers export it on demand (``cua_stream.tasks.miniwob.export``) and ``task_roots``."""
        from cua_stream.tasks import BUNDLED_DIR
        from cua_stream.tasks.miniwob.export import exported_suite_root

        roots = (BUNDLED_DIR, exported_suite_root(), *self.task_roots)
        return tuple(Path(os.path.realpath(Path(d).expanduser())) for d in roots)

    def allowing(self, tasks: Iterable[TaskRef]) -> ProducerConfig:
        """This config with the task directories ``tasks`` name among its roots: the producer of a command
        runs the tasks that command's own arguments named (``eval run --tasks DIR``), and no others."""
        named = [t.path for t in tasks if t.path and t.path not in self.task_roots]
        if not named:
            return self
        return msgspec.structs.replace(self, task_roots=[*self.task_roots, *dict.fromkeys(named)])

    @property
    def trials_path(self) -> Path:
        return Path(self.trials_dir) if self.trials_dir else state_dir() / "trials"


def harbor_environments() -> tuple[str, ...]:
    """The environment types of the installed Harbor (imported only when a name is not one of ours)."""
    from harbor.models.environment_type import EnvironmentType

    return tuple(e.value for e in EnvironmentType)


def producer_config(
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    bus_overrides: Mapping[str, Any] | None = None,
) -> ProducerConfig:
    """The ``[producer]`` section (file < env < overrides) with the ``[bus]`` section inside it."""
    return stage_config(ProducerConfig, file_data, overrides, bus_overrides)


PRODUCER_DEFAULTS: Mapping[str, Any] = {
    f.name: f.default for f in msgspec.structs.fields(ProducerConfig) if f.default is not msgspec.NODEFAULT
}
"""Each ``[producer]`` field's default, for the plans that set the section (``learn``, ``demo``)."""
