"""Configuration of the reference engine daemon (section ``engine``; env ``CUA_ENGINE_<FIELD>``)."""

from __future__ import annotations

import msgspec

from cua_stream.config import Secret


class EngineConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The CPU reference engine: which model it serves, where it listens, how it samples."""

    model_path: str
    """Directory with a saved Qwen3-VL model and processor (e.g. from ``cua-stream make-tiny-model``)."""
    host: str = "127.0.0.1"
    """Listen address (loopback by default: set api_key before listening wider)."""
    port: int = 30000
    """Listen port of the engine's HTTP API."""
    served_model_name: str = ""
    """Name reported by /get_model_info; defaults to model_path."""
    weight_version: str = "0"
    """Version label of the weights at start; /update_weights_from_disk replaces it."""
    seed: int = 0
    """Base of per-request sampling seeds when a request sets no ``sampling_seed``."""
    max_running_requests: int = 16
    """Requests decoded side by side (a token each per round); later ones wait in a FIFO queue."""
    step_latency_s: float = 0.0
    """Benchmarks only: each scheduling round (one token of every running request) takes at least this
    long, as a batched GPU decode step does whatever its batch; 0: off."""
    debug_history: int = 0
    """Keep the last N requests' engine-side inputs and outputs at GET /debug/requests (0: off)."""
    api_key: Secret | None = None
    """When set, every route but ``/health`` requires ``Authorization: Bearer <api_key>`` (SGLang's
    ``--api-key``). Set keys by config file or environment (``CUA_ENGINE_API_KEY``), not on a command
    line every user of the host can read."""
    admin_api_key: Secret | None = None
    """When set, the weight and pause routes (``/update_weights_from_disk``, ``/pause_generation``,
    ``/continue_generation``) take only this key; it also opens every other route."""
    log_level: str = "warning"
    """uvicorn's log level for the engine's server."""

    def __post_init__(self) -> None:
        from cua_stream.config import ConfigError, require_model_dir

        if not self.model_path:
            raise ConfigError("engine.model_path: required")
        require_model_dir("engine.model_path", self.model_path)
        if not 0 < self.port < 65536:
            raise ConfigError(f"engine.port: {self.port} is not a TCP port")
        if self.max_running_requests < 1:
            raise ConfigError("engine.max_running_requests: must be >= 1")
        if not self.step_latency_s >= 0:
            raise ConfigError("engine.step_latency_s: must be >= 0")
        if self.debug_history < 0:
            raise ConfigError("engine.debug_history: must be >= 0")
