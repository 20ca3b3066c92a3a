"""Configuration of the session gateway daemon (section ``gateway``; env ``CUA_GATEWAY_<FIELD>``)."""

from __future__ import annotations

import msgspec

from cua_stream.config import ConfigError, Secret, require_model_dir


class GatewayConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The session gateway: where it listens, which engine it drives, what it renders with."""

    model_path: str
    """Directory of the served model's processor and tokenizer (weights are not loaded)."""
    engine_url: str = "http://127.0.0.1:30000"
    """Base URL of the engine's native API (SGLang server or router, or ``cua-stream engine``)."""
    host: str = "127.0.0.1"
    """Listen address (loopback by default: set the API keys before listening wider)."""
    port: int = 8000
    """Listen port of the gateway's HTTP API."""
    blob_dir: str = ""
    """Blob store for screenshots: a directory or ``s3://bucket/prefix`` (several hosts); empty:
    ``<state dir>/blobs``."""
    template_path: str = ""
    """A chat template file to use instead of the project's own ``qwen3_vl.jinja`` (must keep its
    per-message rendering property)."""
    engine_timeout_s: float = 600.0
    """How long one /generate may take: then the engine is told to abort it and the call is answered
    503 (the engine's own deadline; a client that disconnects first aborts it at once)."""
    max_new_tokens_cap: int = 4096
    """The most completion tokens one call may ask for (a request's ``max_tokens`` and a session's
    ``max_new_tokens`` above it are refused); a call is also capped by what the context length leaves."""
    context_length: int = 0
    """Prompt plus completion tokens the engine serves; 0: the model config's ``max_position_embeddings``.
    A prompt that fills it is refused as ``context_length_exceeded`` (computer-1 then compacts)."""
    session_idle_timeout_s: float = 1800.0
    """A session with no call for this long is expired (its later calls get 404 saying so)."""
    max_sessions: int = 1024
    """Open sessions at most; creating one more is refused with 503 (each holds its episode's images)."""
    drain_hold_s: float = 0.0
    """While draining for a weight update, hold a new chat call up to this long for the resume before
    answering 503 (computer-1 retries a 503 three times without waiting, then the episode is discarded
    as server-unavailable). 0: answer 503 at once."""
    engine_max_in_flight: int = 0
    """Chat calls in flight to the engine at most (0: no bound). Bounded, a waiting training call goes
    before a waiting evaluation call (``eval-`` runs': an eval-lane producer fleet sharing this run's
    engine), so evaluation never queues ahead of training (``gateway.priority``)."""
    api_key: Secret | None = None
    """When set, every route but the probes requires ``Authorization: Bearer <api_key>`` (a session's chat
    route also takes that session's own key, which ``POST /sessions`` returns)."""
    admin_api_key: Secret | None = None
    """When set, ``/admin/*`` (drain, resume) takes only this key; it also opens every other route."""
    engine_api_key: Secret | None = None
    """The engine's API key, sent on every call to it."""
    teacher_url: str = ""
    """Base URL of teachers for sessions that record forced completions (``record-oracle``: the bundled
    tasks' oracle); empty: no teacher, and a session asking for one is refused."""
    log_level: str = "warning"
    """uvicorn's log level for the gateway's server."""

    def __post_init__(self) -> None:
        if not self.model_path:
            raise ConfigError("gateway.model_path: required")
        require_model_dir("gateway.model_path", self.model_path)
        if not self.engine_url.startswith(("http://", "https://")):
            raise ConfigError(f"gateway.engine_url: expected an http(s) URL, got {self.engine_url!r}")
        if self.teacher_url and not self.teacher_url.startswith(("http://", "https://")):
            raise ConfigError(f"gateway.teacher_url: expected an http(s) URL, got {self.teacher_url!r}")
        if not 0 < self.port < 65536:
            raise ConfigError(f"gateway.port: {self.port} is not a TCP port")
        if self.engine_max_in_flight < 0:
            raise ConfigError("gateway.engine_max_in_flight: must be >= 0 (0: no bound)")
        if self.drain_hold_s < 0:
            raise ConfigError("gateway.drain_hold_s: must be >= 0")
        if self.engine_timeout_s <= 0:
            raise ConfigError("gateway.engine_timeout_s: must be > 0")
        if self.max_new_tokens_cap < 1:
            raise ConfigError("gateway.max_new_tokens_cap: must be >= 1")
        if self.context_length < 0:
            raise ConfigError("gateway.context_length: must be >= 0 (0: from the model config)")
        if self.session_idle_timeout_s <= 0:
            raise ConfigError("gateway.session_idle_timeout_s: must be > 0")
        if self.max_sessions < 1:
            raise ConfigError("gateway.max_sessions: must be >= 1")
