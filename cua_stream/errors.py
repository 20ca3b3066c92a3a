"""One error hierarchy and one policy table: what each failure means for the record being processed.

``POLICY`` maps each error class to an ``Action``: retry the operation, dead-letter the record and carry
on, or crash the process (a supervisor restarts it and it resumes from its committed offsets). A test
walks the hierarchy and finds every class in the table.
"""

from __future__ import annotations

import enum


class Action(enum.StrEnum):
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    CRASH = "crash"


class CuaError(Exception):
    """Base of cua-stream's own errors."""

    retriable: bool = False


class RecordError(CuaError):
    """A record cannot be processed as it is: it goes to the dead-letter topic with this reason."""

    reason: str = "invalid_record"


class UndecodableRecord(RecordError):
    """The value is not a valid msgpack record of any known type."""

    reason = "undecodable"


class UnknownSchema(RecordError):
    """The ``schema`` header names a schema this reader does not know."""

    reason = "unknown_schema"


class UnexpectedRecordType(RecordError):
    """A valid record of a type this topic does not carry."""

    reason = "unexpected_type"


class BlobError(CuaError):
    """Base of blob-store errors."""


class BlobNotFound(BlobError, KeyError):
    """No blob with this sha256 in the store (the claim-check points nowhere)."""


class BlobCorrupted(BlobError):
    """The stored bytes no longer hash to their name."""


class BrokerError(CuaError):
    """The local Kafka broker could not be set up, started or stopped; the message says what to do."""


class BusUnavailable(CuaError):
    """Kafka could not be reached within the timeout."""

    retriable = True


POLICY: dict[type[CuaError], Action] = {
    CuaError: Action.CRASH,
    RecordError: Action.DEAD_LETTER,
    UndecodableRecord: Action.DEAD_LETTER,
    UnknownSchema: Action.DEAD_LETTER,
    UnexpectedRecordType: Action.DEAD_LETTER,
    BlobError: Action.CRASH,
    BlobNotFound: Action.DEAD_LETTER,
    BlobCorrupted: Action.CRASH,
    BrokerError: Action.CRASH,
    BusUnavailable: Action.RETRY,
}


def action_for(error: BaseException) -> Action:
    """The policy for ``error``: its most specific class in the table; unknown errors crash."""
    for cls in type(error).__mro__:
        if cls in POLICY:
            return POLICY[cls]  # type: ignore[index]
    return Action.CRASH
