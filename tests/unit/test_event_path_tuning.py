"""The event path's two process-level settings: the startup heap frozen out of the cyclic collector's
sight, and aiokafka's fixed wait before a transaction's first AddPartitionsToTxn retry shortened."""

from __future__ import annotations

import gc
import weakref

from aiokafka.producer import sender

from cua_stream.bus.transaction import TXN_RETRY_BACKOFF_MS, shorten_first_add_backoff
from cua_stream.lifecycle import freeze_startup_heap


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_freeze_takes_live_objects_out_of_full_collections() -> None:
    # A full collection walks every object the generations track (gc.get_objects()); the frozen ones sit
    # in the permanent generation, never walked. Asserted on what is walked, not on how long a collection
    # takes (two timings of a few milliseconds compared: a busy machine's preemption decides that).
    gc.unfreeze()
    try:
        heap = [Cycle() for _ in range(50_000)]  # a startup heap: alive for the process's life
        walked = {id(o) for o in gc.get_objects()}
        assert all(id(c) in walked for c in heap)
        frozen = freeze_startup_heap()
        assert frozen >= len(heap)
        walked = {id(o) for o in gc.get_objects()}
        assert not any(id(c) in walked for c in heap)
        assert all(c.me is c for c in heap)  # still alive: frozen, not collected
    finally:
        gc.unfreeze()


def test_freeze_collects_garbage_first() -> None:
    gc.unfreeze()
    try:
        gc.disable()  # no collection of its own between the garbage made and the freeze
        garbage = weakref.ref(Cycle())  # freed only by the cyclic collector; frozen, it would stay
        alive = Cycle()
        freeze_startup_heap()
        assert garbage() is None
        assert alive not in gc.get_objects()  # frozen: out of the tracked generations
    finally:
        gc.enable()
        gc.unfreeze()


def test_first_add_backoff_only_ever_lowered() -> None:
    before = sender.BACKOFF_OVERRIDE
    try:
        sender.BACKOFF_OVERRIDE = 0.02  # aiokafka 0.14's own value
        shorten_first_add_backoff()
        assert sender.BACKOFF_OVERRIDE == TXN_RETRY_BACKOFF_MS / 1000 < 0.02
        shorten_first_add_backoff(50)  # never raised above what it is
        assert sender.BACKOFF_OVERRIDE == TXN_RETRY_BACKOFF_MS / 1000
    finally:
        sender.BACKOFF_OVERRIDE = before
