"""Starting a Kafka client: retried with backoff while the brokers cannot be reached (the policy for
``BusUnavailable``), then one clear error instead of a client library's traceback; and the one place a
client's security settings come from (``client_security``), so no client is ever made without them.

A refusal (wrong password, unknown user, an untrusted certificate, a client without credentials at a
secured broker) is not retried: it will not heal by waiting, and 30 s of backoff would hide it. aiokafka
reports it, at bootstrap, as the same ``KafkaConnectionError`` as an unreachable broker, so after a
failed attempt one probe connection asks the first broker why (``_refusal``)."""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    IllegalSaslStateError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context

from cua_stream.config import BusConfig
from cua_stream.errors import BusRefused, BusUnavailable

log = logging.getLogger(__name__)


MIN_ATTEMPT_S = 1.0
"""The shortest time one start attempt is given (with ``connect_timeout_s`` 0: one try)."""


def client_security(config: BusConfig) -> dict[str, Any]:
    """The security keyword arguments of every aiokafka client (producer, consumer, admin) for
    ``config``: nothing beyond the protocol for PLAINTEXT; SCRAM credentials and a TLS context that
    verifies the brokers' certificate and name against ``bus.ssl_cafile`` for SASL_SSL."""
    if config.security_protocol == "PLAINTEXT":
        return {"security_protocol": "PLAINTEXT"}
    return {
        "security_protocol": config.security_protocol,
        "sasl_mechanism": config.sasl_mechanism,
        "sasl_plain_username": config.sasl_username,
        "sasl_plain_password": config.password().reveal(),
        "ssl_context": create_ssl_context(cafile=config.ssl_cafile or None),
    }


AUTHORIZATION_ERRORS = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
"""What the brokers answer a principal that an ACL does not allow the request: not retried (no wait
grants it), whether at start (an idempotent producer of a principal that may write nowhere) or later."""

_REFUSALS = (
    AuthenticationFailedError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
    # an untrusted or misnamed certificate; not any TLS error: a broker going down mid-handshake (an EOF)
    # is the retry loop's, as any unreachable broker
    ssl.SSLCertVerificationError,
)


async def _refusal(config: BusConfig, failure: Exception) -> BusRefused | None:
    """Why the first broker refuses this client, if it does (None: unreachable, or it accepts us), after
    an attempt that ended in ``failure``."""
    host, _, port = config.bootstrap_servers.split(",")[0].rpartition(":")
    probe_s = max(MIN_ATTEMPT_S, min(10.0, config.connect_timeout_s))
    if config.security_protocol == "PLAINTEXT":
        # a secured listener closes a plaintext request unanswered, as if it were down: one TLS handshake
        # tells the two apart (a listener that never answered is no secured one: it would have closed)
        if isinstance(failure, TimeoutError) or not await _speaks_tls(host.strip("[]"), int(port), probe_s):
            return None
        return BusRefused(
            f"Kafka at {config.bootstrap_servers} requires SASL_SSL authentication (its listener speaks TLS; "
            "this client is PLAINTEXT): set bus.security_protocol = SASL_SSL with bus.sasl_username, "
            "bus.sasl_password_file and bus.ssl_cafile (env CUA_SECURITY_PROTOCOL, ...)"
        )
    try:
        with anyio.fail_after(probe_s):
            conn = await create_conn(
                host.strip("[]"), int(port), request_timeout_ms=config.request_timeout_ms,
                **client_security(config),
            )  # fmt: skip
    except _REFUSALS as e:
        tls = isinstance(e, ssl.SSLCertVerificationError)
        what = "TLS" if tls else f"SASL {config.sasl_mechanism}"
        hint = "bus.ssl_cafile and the broker's name" if tls else "bus.sasl_username / its password"
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return BusRefused(
            f"Kafka at {config.bootstrap_servers} refused {config.sasl_username!r} ({what}): {reason} "
            f"(check {hint})"
        )
    except Exception:  # unreachable, or a timeout: the retry loop's business
        return None
    conn.close()
    return None


async def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether the listener at ``host:port`` answers a TLS handshake (a certificate this host does not
    trust says so too: nothing is sent over the connection)."""
    try:
        with anyio.fail_after(timeout_s):
            stream = await anyio.connect_tcp(host, port, tls=True, tls_standard_compatible=False)
    except ssl.SSLCertVerificationError:
        return True  # a certificate was offered: TLS
    except Exception:  # closed, reset, no answer, not TLS
        return False
    await stream.aclose()
    return True


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
        except AUTHORIZATION_ERRORS as e:
            await _stop_quietly(stop)
            raise BusRefused(
                f"Kafka at {config.bootstrap_servers} refused {config.sasl_username or 'this client'!r}: {e}: "
                "no ACL allows what this client needs (each role's ACLs: `cua-stream acl print`)"
            ) from None
        except (KafkaConnectionError, TimeoutError) as e:
            refused = await _refusal(config, e)
            if refused is not None:
                await _stop_quietly(stop)
                raise refused from None
            attempt += 1
            wait = backoff_s(attempt)
            if time.monotonic() + wait > deadline:
                await _stop_quietly(stop)
                raise BusUnavailable(
                    f"cannot reach Kafka at {config.bootstrap_servers} "
                    f"(tried for {config.connect_timeout_s:g} s, bus.connect_timeout_s): {e or 'no answer'}"
                ) from None
            log.warning("Kafka at %s unreachable (%s); retrying in %.1f s", config.bootstrap_servers, e, wait)
            await anyio.sleep(wait)


async def _stop_quietly(stop: Callable[[], Awaitable[None]]) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        try:
            await stop()
        except Exception as stop_error:  # the client never started: nothing to lose
            log.debug("stopping a client that never started: %r", stop_error)
