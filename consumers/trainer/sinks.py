"""The trainer's live metrics sinks (``trainer.metrics_sinks``): each commit's records, once published,
as TensorBoard or W&B scalars (``cua_stream.metrics_writers``).

A sink is a view of the log, never part of a step: a sink that fails is logged and the step stands (the
train_steps topic keeps every record; ``cua-stream export-metrics`` writes them into a new directory).
A restarted trainer writes no step twice: each sink reads back the highest step its directory holds
before its first write. Nor does it lose one: the records its checkpoint says a step must publish (those
of a trainer killed between its checkpoint and its sinks) are offered to the sinks again at the start."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cua_stream.events import Event, from_json
from cua_stream.metrics_sinks import SinkSpec
from cua_stream.metrics_writers import MetricsSink, open_writer

log = logging.getLogger(__name__)


class TrainerSinks:
    def __init__(self, specs: Sequence[str], run_id: str) -> None:
        # opened lazily (at the first write): a trainer without steps creates no directory
        self.sinks = [(text, MetricsSink(open_writer(SinkSpec.parse(text), run_id))) for text in specs]

    def write(self, published: Sequence[Event]) -> None:
        """Write a commit's published records to every sink (a blocking call: run it off the event loop)."""
        for text, sink in self.sinks:
            try:
                sink.write(published)
            except Exception:  # a view of the log must not stop training
                log.exception("metrics sink %s failed; training goes on", text)

    def write_pending(self, pending: Sequence[str]) -> None:
        """The checkpoint's pending records (JSON), after a restart published those the log missed."""
        if self.sinks and pending:
            self.write([from_json(raw) for raw in pending])

    def close(self) -> None:
        for text, sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("metrics sink %s did not close cleanly", text)
