"""One error hierarchy and one policy table: what each failure means for the record or request at hand.

Every error class cua-stream raises on purpose is defined here (the modules that raise them import them
from here), and ``POLICY`` maps each one to an ``Action``:

- ``retry``: the operation may succeed later (a broker or engine that is down); back off and try again.
- ``dead_letter``: this record can never be processed; it goes to the DLQ with the error's ``reason``,
  and the stage carries on with the next record.
- ``refuse``: this HTTP request is answered with the error's status and nothing is recorded; the
  service carries on.
- ``crash``: the process cannot go on correctly (bad config, corrupted state); it exits with a one-line
  error, and a supervisor restarts it from its committed offsets.

The bus consults the table (``action_for``) for every failure while handling a record, so the table
decides, and a test walks the hierarchy and finds every class in it.
"""

from __future__ import annotations

import enum


class Action(enum.StrEnum):
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    REFUSE = "refuse"
    CRASH = "crash"


class CuaError(Exception):
    """Base of cua-stream's own errors."""

    retriable: bool = False


# -- records ----------------------------------------------------------------------------------------


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


class InvalidIdentity(RecordError):
    """An episode record with an empty run, group or episode id: it cannot be joined or deduplicated."""

    reason = "invalid_identity"


class UntrainableRecord(RecordError):
    """A record that decodes but breaks what the trainer relies on (its episode's call tree, version
    spans, lengths, token ids or images, or a reward that is not a finite number): its group is dropped
    and the record dead-lettered, instead of crash-looping the trainer."""

    reason = "untrainable"


class TransformFailed(RecordError):
    """A stage's handler raised on this record (which decoded fine); the message names the exception."""

    reason = "transform_error"


# -- blobs ------------------------------------------------------------------------------------------


class BlobError(CuaError):
    """Base of blob-store errors."""


class BlobNotFound(BlobError, KeyError):
    """No blob with this sha256 in the store (the claim-check points nowhere)."""


class BlobStoreUnavailable(BlobError):
    """The blob store cannot be reached or used (bucket missing, no credentials): fails at start."""


class BlobCorrupted(BlobError):
    """The stored bytes no longer hash to their name."""


# -- infrastructure and configuration ----------------------------------------------------------------


class BrokerError(CuaError):
    """The local Kafka broker could not be set up, started or stopped; the message says what to do."""


class PortInUse(BrokerError):
    """The broker's port was taken when it started (by another process, or for a moment by a client's
    outgoing socket: a port in the kernel's ephemeral range can be handed to one)."""


class BusUnavailable(CuaError):
    """Kafka could not be reached within the timeout."""

    retriable = True


class BusRefused(CuaError):
    """Kafka refused this client's credentials or TLS (wrong password, unknown user, untrusted CA):
    fails at start, never retried (waiting does not fix a password)."""


class TopicMissing(CuaError):
    """A topic a daemon needs does not exist (wrong prefix, or ``cua-stream topics create`` not run)."""


class UnknownTopicError(CuaError, KeyError):
    """A topic name that is not in the registry (the message lists the known ones)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ContainerEngineError(CuaError):
    """The container engine (the private Docker daemon, the compose plugin, an image) is missing or did
    not start; the message says what to do."""


class NamespaceError(CuaError):
    """An episode's desktop namespace could not be set up (not root, ``unshare`` missing, setup failed)."""


class DaemonDidNotStart(CuaError):
    """A daemon a chaos run started exited or never answered its health check; its log
    says why."""


class TaskStartFailed(CuaError):
    """A task's ``environment/start.sh`` failed: the episode's environment never came up (Harbor records
    it as the trial's environment-phase exception; the scorer discards the episode)."""


class UnknownTask(CuaError, ValueError):
    """A task name that names no task (bundled, MiniWoB++, or a task directory); the message lists the
    closest names."""


class MiniwobMissing(CuaError, LookupError):
    """The MiniWoB++ package, whose pages the ``miniwob/*`` tasks serve, is not installed (or has no
    ``html/``); the message names the setup step that installs it."""


class TaskVersionMismatch(CuaError, ValueError):
    """A task directory exported from another MiniWoB++ version than the one installed where it is
    resolved or run: refused, naming both versions (its pages, and so its problems, may differ)."""


class BrowserError(CuaError):
    """A headless Chromium driven over DevTools (``cua_stream.devtools``: the MiniWoB++ teacher's shadow
    pages) is missing, did not start, closed its connection, or refused a command; the message says
    which."""


class ReplayDiverged(CuaError):
    """A re-training (``trainer.replay_batches_from``) dropped a group its recorded step trained: it
    stops there, the drop being the difference it was run to find."""


class ConfigError(CuaError, ValueError):
    """A configuration value is missing or invalid; the message names the field."""


class PromptTemplateChanged(CuaError, RuntimeError):
    """Harbor's computer-1 prompt no longer has the sentences the binding rewrites."""


class CoordinateError(CuaError, ValueError):
    """An action's coordinates are incomplete or malformed (the model sees it as a parse error)."""


# -- the engine and the gateway (HTTP) -----------------------------------------------------------------


class ImageDataError(CuaError, ValueError):
    """An image in a request is not strict base64, not an image, or over the pixel limit (HTTP 400)."""


class EngineInputError(CuaError, ValueError):
    """A /generate request's ids or images are inconsistent or invalid (HTTP 400); the message says how."""


class SamplingError(EngineInputError):
    """An invalid or unsupported sampling parameter; the message names it (HTTP 400)."""


class Refusal(CuaError):
    """A request the gateway will not serve. ``status`` is the HTTP code; ``message`` names the field or
    the values involved. Refusals are answered, counted in the session's statuses, and never recorded."""

    def __init__(self, status: int, message: str, *, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class EngineHTTPError(CuaError):
    """The engine answered non-2xx: passed on to the client with its status, and not recorded."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(f"engine answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


class EngineUnavailable(CuaError):
    """The engine could not be reached or timed out (the client gets 503: not the policy's doing)."""

    retriable = True


class EngineUnreachable(EngineUnavailable):
    """The engine did not answer at all, after retries (restarting, rescheduled, partitioned away): a
    trainer goes on training and loads its weights there once it answers again."""


class EngineProtocolError(CuaError):
    """The engine's reply is not a valid /generate response (the client gets 502)."""


POLICY: dict[type[CuaError], Action] = {
    CuaError: Action.CRASH,
    RecordError: Action.DEAD_LETTER,
    UndecodableRecord: Action.DEAD_LETTER,
    UnknownSchema: Action.DEAD_LETTER,
    UnexpectedRecordType: Action.DEAD_LETTER,
    InvalidIdentity: Action.DEAD_LETTER,
    TransformFailed: Action.DEAD_LETTER,
    UntrainableRecord: Action.DEAD_LETTER,
    BlobError: Action.CRASH,
    BlobNotFound: Action.DEAD_LETTER,
    BlobCorrupted: Action.CRASH,
    BlobStoreUnavailable: Action.CRASH,
    BrokerError: Action.CRASH,
    PortInUse: Action.CRASH,  # a chaos restart waits for its port (chaos.runner); anywhere else: exit naming it
    BusUnavailable: Action.RETRY,
    BusRefused: Action.CRASH,
    TopicMissing: Action.CRASH,
    NamespaceError: Action.CRASH,
    ContainerEngineError: Action.CRASH,
    TaskStartFailed: Action.CRASH,
    UnknownTask: Action.CRASH,
    MiniwobMissing: Action.CRASH,
    TaskVersionMismatch: Action.CRASH,
    BrowserError: Action.CRASH,
    DaemonDidNotStart: Action.CRASH,
    UnknownTopicError: Action.CRASH,
    ReplayDiverged: Action.CRASH,
    ConfigError: Action.CRASH,
    PromptTemplateChanged: Action.CRASH,
    CoordinateError: Action.REFUSE,
    ImageDataError: Action.REFUSE,
    EngineInputError: Action.REFUSE,
    SamplingError: Action.REFUSE,
    Refusal: Action.REFUSE,
    EngineHTTPError: Action.REFUSE,
    EngineUnavailable: Action.RETRY,
    EngineUnreachable: Action.RETRY,
    EngineProtocolError: Action.REFUSE,
}


def action_for(error: BaseException) -> Action:
    """The policy for ``error``: its most specific class in the table; errors that are not ours crash."""
    for cls in type(error).__mro__:
        if cls in POLICY:
            return POLICY[cls]  # type: ignore[index]
    return Action.CRASH
