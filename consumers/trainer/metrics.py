"""The trainer's Prometheus families (``--metrics-port``)."""

from __future__ import annotations

from cua_stream.bus.lag import ConsumerLag
from cua_stream.metrics import Registry


class TrainerMetrics:
    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.steps = r.counter("cua_trainer_steps_total", "Optimizer steps committed.")
        self.groups_issued = r.counter("cua_trainer_groups_issued_total", "Groups the feeder issued.")
        self.groups_trained = r.counter("cua_trainer_groups_trained_total", "Groups trained.")
        self.drops = r.counter("cua_trainer_groups_dropped_total", "Groups dropped, by reason.", ("reason",))
        self.staleness = r.counter(
            "cua_trainer_sample_staleness_total",
            "Trained samples by lag: the trainer's version minus the sample's oldest token version.",
            ("lag",),
        )
        self.undecodable = r.counter("cua_trainer_undecodable_total", "Input records skipped as undecodable.")
        self.logprob_gap = r.gauge("cua_trainer_logprob_gap", "Mean |trainer - engine| logprob, last step.")
        self.grad_norm = r.gauge("cua_trainer_grad_norm", "Gradient norm before clipping, last step.")
        self.version = r.gauge("cua_trainer_policy_version", "The policy version the trainer published last.")
        self.weight_push_s = r.gauge(
            "cua_trainer_weight_push_seconds",
            "Wall time of the last weight push to the engine (gateway drained, weights loaded, resumed).",
        )
        self.consumer_lag = ConsumerLag(r)
        """Its lag behind its input partitions (the daemon samples it while the page is served)."""

    def stepped(self, *, groups: int, logprob_gap: float, grad_norm: float, version: int) -> None:
        """A step was taken (counted when its commit is written)."""
        self.steps.inc()
        self.groups_trained.inc(groups)
        self.logprob_gap.set(logprob_gap)
        self.grad_norm.set(grad_norm)
        self.version.set(version)

    def render(self) -> str:
        return self.registry.render()
