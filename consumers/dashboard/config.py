"""Configuration of the dashboard (section ``dashboard``; env ``CUA_DASHBOARD_<FIELD>``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from cua_stream.bus.reader import Bound
from cua_stream.config import BusConfig, ConfigError, stage_config, state_dir


class DashboardConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the dashboard reads (live, or a replayed range) and where it serves the page."""

    host: str = "127.0.0.1"
    """Listen address of the dashboard's web server."""
    port: int = 8050
    """Listen port of the dashboard's web server."""
    start: str = ""
    """Where reading starts on every topic's partitions: an offset, ``@epoch-ms``, an ISO-8601 time or
    ``beginning``; empty: the beginning (the whole run so far)."""
    end: str = ""
    """Where a replayed range ends (same forms); empty: follow live."""
    blob_dir: str = ""
    """The gateway's blob store, for the episode view's screenshots; empty: ``<state dir>/blobs``."""
    model_path: str = ""
    """The served model's directory: its tokenizer shows each call's completion as text (empty: ids)."""
    max_streams: int = 64
    """Live streams (open pages) served at once; more are answered 503 with Retry-After. Each holds a
    connection: ~20,500 uncapped ones had exhausted the process's file descriptors."""
    stream_send_timeout_s: float = 30.0
    """A stream whose client has not taken a write for this long (it stopped reading) is closed."""
    stream_max_s: float = 600.0
    """Every stream ends after this long; the browser reconnects by itself (a forgotten tab, a client
    that vanished without a FIN, holds its slot no longer than this)."""
    max_connections: int = 256
    """Requests of any kind in progress at once (live streams included); beyond, 503 with Retry-After at
    once. Counted by the app, not by uvicorn's ``limit_concurrency``: that counted connections whose
    request was not read yet, and refused without Retry-After (300 simultaneous clients got 19 streams)."""
    bus: BusConfig = BusConfig()

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("dashboard.port: must be 0..65535")
        if self.max_streams < 1:
            raise ConfigError("dashboard.max_streams: must be >= 1")
        if self.max_connections <= self.max_streams:
            raise ConfigError("dashboard.max_connections: must be more than dashboard.max_streams")
        for name in ("stream_send_timeout_s", "stream_max_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"dashboard.{name}: must be > 0")
        for name in ("start", "end"):
            try:
                Bound.parse(getattr(self, name), default="beginning")
            except ValueError as e:
                raise ConfigError(f"dashboard.{name}: {e}") from None

    @property
    def blobs(self) -> str:
        return self.blob_dir or str(state_dir() / "blobs")


def dashboard_config(
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    bus_overrides: Mapping[str, Any] | None = None,
) -> DashboardConfig:
    """The ``[dashboard]`` section (file < env < overrides) with the ``[bus]`` section inside it."""
    return stage_config(DashboardConfig, "dashboard", file_data, overrides, bus_overrides)
