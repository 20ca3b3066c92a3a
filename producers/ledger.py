"""Which work offsets may be committed, when episodes finish out of order. Pure.

The producer runs many episodes at once; they finish in any order. A partition's committed offset may
only pass a work request once its outcome is published, and never pass one still running: the commit
point is the lowest offset still open (or one past the highest finished, when none is open).
"""

from __future__ import annotations

from collections.abc import Hashable


class OffsetLedger:
    def __init__(self) -> None:
        self._open: dict[Hashable, set[int]] = {}
        self._done: dict[Hashable, int] = {}
        """One past the highest finished offset, per partition."""

    def start(self, partition: Hashable, offset: int) -> None:
        self._open.setdefault(partition, set()).add(offset)

    def finish(self, partition: Hashable, offset: int) -> None:
        self._open.get(partition, set()).discard(offset)
        self._done[partition] = max(self._done.get(partition, 0), offset + 1)

    def commit_point(self, partition: Hashable) -> int | None:
        """The offset to commit for ``partition`` (the next record to read), or None if nothing is due."""
        if partition not in self._done:
            return None
        still_open = self._open.get(partition)
        return min(min(still_open), self._done[partition]) if still_open else self._done[partition]

    def forget(self, partition: Hashable) -> None:
        """Drop a revoked partition (its uncommitted work is re-delivered to the next owner)."""
        self._open.pop(partition, None)
        self._done.pop(partition, None)

    def open_count(self) -> int:
        return sum(len(v) for v in self._open.values())

    def partitions(self) -> list[Hashable]:
        return list(self._done)
