"""The producer's Prometheus families, and what its live progress table shows."""

from __future__ import annotations

from collections import Counter as Tally

from cua_stream.bus.lag import ConsumerLag
from cua_stream.events import Discard, OutcomeEvent
from cua_stream.metrics import Registry
from cua_stream.scoring import classify


class ProducerMetrics:
    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = r = registry or Registry()
        self.running = r.gauge("cua_producer_episodes_running", "Episodes being run now.")
        self.consumer_lag = ConsumerLag(r)
        """Work records not yet taken, per work partition it is assigned (sampled while served)."""
        self.finished = r.counter(
            "cua_producer_episodes_finished_total",
            "Episodes whose outcome is published, by the scorer's verdict (reward or discard) and reason.",
            ("verdict", "reason"),
        )
        self.turns = r.counter(
            "cua_producer_turns_total", "Agent turns of finished episodes (rate: turns/s)."
        )
        self.calls = r.counter(
            "cua_producer_calls_total", "LLM calls of finished episodes (turns + summaries)."
        )
        self.env_start_sum = r.counter(
            "cua_producer_environment_start_seconds_sum", "Time to bring up episode environments."
        )
        self.env_start_count = r.counter(
            "cua_producer_environment_start_seconds_count", "Environment start-ups measured."
        )
        self.episode_seconds_sum = r.counter("cua_producer_episode_seconds_sum", "Wall time of episodes.")
        self.not_run = r.counter(
            "cua_producer_not_run_total",
            "Work refused at admission (no episode run), by reason.",
            ("reason",),
        )
        self.passed_over = r.counter(
            "cua_producer_work_passed_over_total",
            "Work requests of the other lane's runs found on this lane's work topic (not run).",
        )
        self.tally: Tally[str] = Tally()
        """Finished episodes by ``verdict:reason``, for the progress table."""
        self.total_turns = 0
        self.env_starts: list[float] = []

    def record(self, outcome: OutcomeEvent, env_start_s: float | None) -> None:
        """Count a published outcome, with the verdict the scorer will give it (the same pure table)."""
        _, verdict = classify(outcome)
        kind = "discard" if isinstance(verdict, Discard) else "reward"
        self.finished.inc(verdict=kind, reason=verdict.reason)
        self.tally[f"{kind}:{verdict.reason}"] += 1
        self.turns.inc(outcome.n_turns)
        self.total_turns += outcome.n_turns
        self.calls.inc(outcome.n_calls)
        self.episode_seconds_sum.inc(max(0.0, outcome.finished_at - outcome.started_at))
        if env_start_s is not None:
            self.env_start_sum.inc(env_start_s)
            self.env_start_count.inc()
            self.env_starts = [*self.env_starts[-99:], env_start_s]
