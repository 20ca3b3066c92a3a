"""Every environment variable cua-stream names, in one table: what it means, who reads it, what holds
when it is unset.

Two kinds. The variables that set a config field (``CUA_<SECTION>_<FIELD>``, ``CUA_<FIELD>`` for the
``[bus]`` section, and ``config.ENV_NAMES``' own) are not written here: ``docs_reference.field_variables``
derives them from the settings registry (``cua_stream.config.SECTIONS`` and ``env_names``), so a new field has its
variable without a line here. The others are written below, once, each as a constant the code reads it
by (``env_vars.HOME``, never a fresh ``"CUA_HOME"``): the variables cua-stream reads that no field
holds, and the ones it sets for the programs it starts (an episode's task scripts, compose files,
LiteLLM). ``tests/unit/test_env_vars.py`` fails when the code names a variable this table lacks, or the
table lists one nothing names; the reference page (``docs/reference/environment.md``) is made from it.

Standard library only at import: the config module, which reads the environment, imports this one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    """One environment variable."""

    name: str
    meaning: str
    reader: str
    """Who reads it (a module, a field, or the program cua-stream sets it for)."""
    default: str
    """What holds when it is unset."""
    field: tuple[str, str] | None = None
    """(section, field) for a variable that sets a config field."""


# --- read by cua-stream itself ----------------------------------------------------------------------

HOME = "CUA_HOME"
CACHE_DIR = "CUA_CACHE_DIR"
DOCKER_HOME = "CUA_DOCKER_HOME"
LOG_LEVEL = "CUA_LOG_LEVEL"
KAFKA_PASSWORD = "CUA_KAFKA_PASSWORD"
MEGATRON_PYTHON = "CUA_MEGATRON_PYTHON"
HARBOR_MAX_ITERATIONS = "HARBOR_AGENT_MAX_ITERATIONS"
HARBOR_DESKTOP_WIDTH = "HARBOR_CUA_DESKTOP_WIDTH"
HARBOR_DESKTOP_HEIGHT = "HARBOR_CUA_DESKTOP_HEIGHT"
DOCKER_HOST = "DOCKER_HOST"
KAFKA_HOST_PORT = "KAFKA_HOST_PORT"

# --- set by cua-stream for the programs it starts -----------------------------------------------------

LITELLM_COST_MAP = "LITELLM_LOCAL_MODEL_COST_MAP"
TASK_SEED = "CUA_TASK_SEED"
DESKTOP_SIZE = "CUA_DESKTOP_SIZE"
PYTHON = "CUA_PYTHON"
CHECKOUT = "CUA_CHECKOUT"
PYTHON_HOME = "CUA_PYTHON_HOME"
MODELS = "CUA_MODELS"
TRIALS_DIR = "CUA_TRIALS_DIR"
KAFKA_SECRETS = "CUA_KAFKA_SECRETS"
TASKS_IMAGE = "CUA_TASKS_IMAGE"
TASK = "CUA_TASK"
MINIWOB_VERSION = "CUA_MINIWOB_VERSION"

VARIABLES: tuple[EnvVar, ...] = (
    EnvVar(name=HOME, meaning="Where long-lived local state goes: the local broker's data, blobs, runs.",
           reader="cua_stream.config.state_dir", default="the user state directory (~/.local/state/cua-stream)"),
    EnvVar(name=CACHE_DIR, meaning="Where downloads are cached (the Kafka jars).",
           reader="cua_stream.config.cache_dir", default="the user cache directory (~/.cache/cua-stream)"),
    EnvVar(name=DOCKER_HOME, meaning="Where cua-stream's private Docker daemon keeps its data and sockets.",
           reader="cua_stream.config.docker_dir", default="docker/ under CUA_HOME's directory"),
    EnvVar(name=LOG_LEVEL, meaning="Logging level of every command and daemon (a name or a number).",
           reader="cua_stream.config.log_level", default="WARNING"),
    EnvVar(name=MEGATRON_PYTHON, meaning="megatron-bridge's Python, which runs the Megatron trainer's worker.",
           reader="consumers.trainer.backends.megatron_vl_backend", default="what scripts/megatron-env.sh prints"),
    EnvVar(name=HARBOR_MAX_ITERATIONS, meaning="Turn cap of one computer-1 episode (its max_turns).",
           reader="cua_stream.binding.harbor_env", default="the producer's own turn cap"),
    EnvVar(name=HARBOR_DESKTOP_WIDTH, meaning="Desktop and browser window width of an episode, in pixels.",
           reader="cua_stream.binding.harbor_env", default="the producer's desktop_width"),
    EnvVar(name=HARBOR_DESKTOP_HEIGHT, meaning="Desktop and browser window height of an episode, in pixels.",
           reader="cua_stream.binding.harbor_env", default="the producer's desktop_height"),
    EnvVar(name=DOCKER_HOST, meaning="The Docker daemon episodes in containers run on (the docker CLI's own).",
           reader="producers.environments.prepare_docker",
           default="cua-stream's private daemon is started and its socket exported"),
    EnvVar(name=KAFKA_HOST_PORT, meaning="The host port compose/local.yml publishes Kafka on (127.0.0.1).",
           reader="cua_stream.containers.local_compose", default="9092"),
    EnvVar(name=LITELLM_COST_MAP, meaning="LiteLLM reads its model cost map from its package, not the "
           "internet (~8 s and four warnings where that is blocked).",
           reader="LiteLLM (Harbor imports it); set by cua_stream.config.apply_offline_defaults",
           default="True (set for every command unless already set)"),
    EnvVar(name=TASK_SEED, meaning="The seed of an episode's task instance.",
           reader="the task's programs in the episode (start.sh, cua_stream.tasks.verify); set by "
           "producers.environments", default="set for every episode"),
    EnvVar(name=DESKTOP_SIZE, meaning="An episode's screen size, WxH.",
           reader="cua_stream.desktop.environment and the tasks image's entrypoint; set by "
           "producers.environments", default="set for every episode"),
    EnvVar(name=PYTHON, meaning="The interpreter an episode's task scripts run cua-stream's task programs with.",
           reader="the task's scripts (start.sh, tests/test.sh); set by cua_stream.desktop.environment",
           default="python3"),
    EnvVar(name=CHECKOUT, meaning="The checkout compose/local.yml mounts into the services.",
           reader="compose/local.yml; set by cua_stream.containers.local_compose", default="this checkout"),
    EnvVar(name=PYTHON_HOME, meaning="The Python installation the checkout's .venv runs on, mounted likewise.",
           reader="compose/local.yml, cua_stream.containers.app_image; set by cua_stream.containers.local_compose",
           default="the .venv's interpreter's installation"),
    EnvVar(name=MODELS, meaning="The models directory compose/local.yml mounts.",
           reader="compose/local.yml; set by cua_stream.containers.local_compose", default="the --models option"),
    EnvVar(name=TRIALS_DIR, meaning="Where the containerized producer's episodes write their trial logs.",
           reader="compose/docker-producer.yml; set by cua_stream.containers.local_compose",
           default="set by cua-stream containers"),
    EnvVar(name=KAFKA_SECRETS, meaning="The folder of the secure compose stack's CA, certificates and passwords.",
           reader="compose/secure.yml; set by cua_stream.containers.secure_compose",
           default="set by cua-stream containers --secure"),
    EnvVar(name=TASKS_IMAGE, meaning="The image an exported task's Dockerfile builds FROM (a build argument).",
           reader="an exported task's environment/Dockerfile (cua_stream.tasks.miniwob.export)",
           default="cua-tasks:local"),
    EnvVar(name=TASK, meaning="The MiniWoB++ task an exported task's image serves.",
           reader="the tasks image's entrypoint; set by an exported task's Dockerfile", default="set per task"),
    EnvVar(name=MINIWOB_VERSION, meaning="The MiniWoB++ version a task was exported from.",
           reader="the tasks image's entrypoint; set by an exported task's Dockerfile", default="set per task"),
)  # fmt: skip
"""The variables no config field holds (``docs_reference.field_variables`` has those)."""
