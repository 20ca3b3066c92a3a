"""The gateway's metrics (Prometheus text at ``GET /metrics``), on the project's small registry."""

from __future__ import annotations

from cua_stream.metrics import Registry


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.sessions = r.gauge("cua_gateway_sessions", "Open sessions.")
        self.draining = r.gauge("cua_gateway_draining", "1 while draining for a weight update.")
        self.in_flight = r.gauge("cua_gateway_in_flight", "Chat calls being served.")
        self.responses = r.counter(
            "cua_gateway_responses_total", "Chat-completion responses by HTTP status.", ("status",)
        )
        self.recorded = r.counter("cua_gateway_calls_recorded_total", "Recorded calls by kind.", ("kind",))
        self.missing_call_kind = r.counter(
            "cua_gateway_missing_call_kind_total",
            "Recorded calls whose request carried no cua_call_kind (recorded as agent turns).",
        )
        self.tito_mismatch = r.counter(
            "cua_gateway_tito_mismatch_total",
            "Call-tree leaves checked at session close, by mismatch type ('none': re-render matched).",
            ("type",),
        )
        self.overhead_ms = r.counter(
            "cua_gateway_overhead_ms_total", "Time spent in the gateway on recorded calls, engine excluded."
        )
        self.engine_ms = r.counter("cua_gateway_engine_ms_total", "Time spent waiting for /generate.")
        self.cancelled = r.counter(
            "cua_gateway_calls_cancelled_total",
            "Chat calls whose client went away mid-call (the engine's work was aborted; nothing recorded).",
        )
        self.sessions_expired = r.counter(
            "cua_gateway_sessions_expired_total", "Sessions dropped by the gateway, by reason.", ("reason",)
        )
        self.engine_up = r.gauge("cua_gateway_engine_up", "1 if the engine answered its last health check.")
        self.engine_waiting = r.gauge(
            "cua_gateway_engine_waiting",
            "Chat calls waiting for an engine slot (gateway.engine_max_in_flight), by lane: train before eval.",
            ("lane",),
        )

    def render(
        self, *, sessions: int, draining: bool, in_flight: int, waiting: dict[str, int] | None = None
    ) -> str:
        for lane, n in (waiting or {}).items():
            self.engine_waiting.set(n, lane=lane)
        self.sessions.set(sessions)
        self.draining.set(int(draining))
        self.in_flight.set(in_flight)
        return self.registry.render()
