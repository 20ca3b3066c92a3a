"""Starting a Kafka client: retried with backoff while the brokers cannot be reached (the policy for
``BusUnavailable``), then one clear error instead of a client library's traceback."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from aiokafka.errors import KafkaConnectionError

from cua_stream.config import BusConfig
from cua_stream.errors import BusUnavailable

log = logging.getLogger(__name__)


MIN_ATTEMPT_S = 1.0
"""The shortest time one start attempt is given (with ``connect_timeout_s`` 0: one try)."""


def backoff_s(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): 0.5 s doubling to at most 10 s."""
    return min(10.0, 0.5 * 2 ** (attempt - 1))


async def start_client(
    start: Callable[[], Awaitable[None]], config: BusConfig, stop: Callable[[], Awaitable[None]]
) -> None:
    """``await start()`` (an aiokafka client's ``start``), retried until ``bus.connect_timeout_s``; if it
    never succeeds, ``stop()`` releases what the client holds before the error is raised.

    Each attempt is bounded by the time left too: a listener that accepts the connection but never
    answers (a wrong port, a proxy) held a client for its 30 s request timeout, past a 10 s deadline."""
    deadline = time.monotonic() + config.connect_timeout_s
    attempt = 0
    while True:
        try:
            with anyio.fail_after(max(deadline - time.monotonic(), MIN_ATTEMPT_S)):
                await start()
            return
        except (KafkaConnectionError, TimeoutError) as e:
            attempt += 1
            wait = backoff_s(attempt)
            if time.monotonic() + wait > deadline:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    try:
                        await stop()
                    except Exception as stop_error:  # the client never started: nothing to lose
                        log.debug("stopping a client that never started: %r", stop_error)
                raise BusUnavailable(
                    f"cannot reach Kafka at {config.bootstrap_servers} "
                    f"(tried for {config.connect_timeout_s:g} s, bus.connect_timeout_s): {e or 'no answer'}"
                ) from None
            log.warning("Kafka at %s unreachable (%s); retrying in %.1f s", config.bootstrap_servers, e, wait)
            await anyio.sleep(wait)
