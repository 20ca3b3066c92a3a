"""In-memory stand-ins for unit tests only (integration tests use the real broker)."""

from __future__ import annotations

from collections import defaultdict

from cua_stream.events import Event, decode, encode
from cua_stream.topics import TopicSpec


class MemorySink:
    """An EventSink that keeps what was published, per logical topic name, round-tripped through msgpack
    so a unit test sees exactly what a consumer would decode."""

    def __init__(self) -> None:
        self.published: dict[str, list[Event]] = defaultdict(list)

    async def publish(self, spec: TopicSpec, event: Event) -> None:
        if not spec.accepts(event):
            raise TypeError(f"{type(event).__name__} does not belong on topic {spec.name!r}")
        self.published[spec.name].append(decode(encode(event)))

    def of(self, spec: TopicSpec) -> list[Event]:
        return list(self.published[spec.name])
