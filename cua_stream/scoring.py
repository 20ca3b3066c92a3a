"""The scoring table: how one episode's outcome becomes a reward or a reason-coded discard.

One pure function (``score``) over one ordered table (``ROWS``); the first row whose condition holds
decides. The rule set is the failure-scoring contract (docs/contracts.md):

- failures that are not the policy's doing are **discarded** with a reason, so they never train it:
  the sandbox lost mid-episode, the session server draining (503), the sandbox never coming up;
- every other failure is **scored 0** with a reason that names it (token cap, context overflow, other
  session-server statuses, verifier failures, raw SDK/transport errors);
- a clean finish gets the **verifier's reward**; a reward that is not a finite number (NaN, ±inf) scores 0
  as ``invalid_reward`` (one NaN would make every advantage of its group NaN);
- an exception type this table does not know scores 0 as ``unclassified:<type>``: never silently a valid
  reward (Harbor's own error-policy table, ``harbor/models/trial/error_policy.py``, grades an unlisted
  type and calls its reward valid).

Exception types are matched by class name, as Harbor records them (``ExceptionInfo.exception_type``),
plus the defining module where a bare name is ambiguous (``APIError``, ``Timeout``). Tests check every
name here against the real class. This module imports neither Harbor nor Kafka.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from cua_stream.events import NOT_RUN, Discard, DiscardReason, ExceptionRecord, OutcomeEvent, Phase, Reward

Verdict = Reward | Discard
Combine = Literal["reject", "mean", "min", "max", "sum"]


@dataclass(frozen=True, slots=True)
class RewardChoice:
    """Which number a verifier's ``rewards`` dict contributes (the scorer's config sets it)."""

    key: str = "reward"
    """Used whenever the verifier returned it (reward.txt always yields ``{"reward": x}``)."""
    combine: Combine = "reject"
    """Several keys and none is ``key``: combine them, or ``reject`` (reward 0, ``ambiguous_reward``)."""


DEFAULT_CHOICE = RewardChoice()


# ---------------------------------------------------------------------------------------------------
# Exception groups: class names, and the module family that must define them (so a same-named class
# elsewhere is not mistaken for them). An empty ``module`` (an outcome written without one) matches on
# the name alone.

HARBOR = ("harbor.",)
LLM_CLIENT = ("litellm.", "openai.")
STDLIB = ("builtins", "asyncio", "socket", "ssl", "concurrent.futures")
SDK = (  # top-level packages of the transports Harbor's environments exec through
    "httpx",
    "httpcore",
    "aiohttp",
    "requests",
    "urllib3",
    "websockets",
    "grpc",
    "docker",
    "daytona",
    "e2b",
    "modal",
    "kubernetes",
    "asyncssh",
    "paramiko",
    "botocore",
    "runloop_api_client",
)


@dataclass(frozen=True, slots=True)
class Names:
    """Exception classes by name, defined under one of ``modules``."""

    names: frozenset[str]
    modules: tuple[str, ...]

    def match(self, exc: ExceptionRecord | None) -> bool:
        return exc is not None and exc.type in self.names and _from(exc, self.modules)


def _from(exc: ExceptionRecord, modules: tuple[str, ...]) -> bool:
    return not exc.module or exc.module.startswith(modules)


CANCELLED = Names(frozenset({"CancelledError"}), STDLIB)
"""The producer (or Harbor) cancelled the trial: shutdown or abandonment, not an outcome."""

SANDBOX_RUNTIME = Names(frozenset({"RuntimeRequestError"}), HARBOR)
"""computer-1's in-sandbox command failed (``harbor.agents.computer_1.runtime``)."""

OUTPUT_CAP = Names(frozenset({"OutputLengthExceededError"}), HARBOR)
CONTEXT_OVERFLOW = Names(
    frozenset({"ContextLengthExceededError", "ContextWindowExceededError"}), HARBOR + LLM_CLIENT
)
"""Harbor's own overflow, and litellm's should it escape untranslated."""

LLM_STATUS: Mapping[str, int | None] = {
    # litellm's client exceptions and the HTTP status each stands for (litellm's exception mapping for
    # OpenAI-compatible servers). None: the status is the session server's last one (APIError carries
    # whatever the server sent) or there is none (the request never got an HTTP answer).
    "BadRequestError": 400,
    "AuthenticationError": 401,
    "PermissionDeniedError": 403,
    "NotFoundError": 404,
    "UnprocessableEntityError": 422,
    "RateLimitError": 429,
    "InternalServerError": 500,
    "BadGatewayError": 502,
    "ServiceUnavailableError": 503,
    "ContentPolicyViolationError": 400,
    "APIError": None,
    "APIConnectionError": None,
    "Timeout": None,
    "APIResponseValidationError": None,
    "UnsupportedParamsError": None,
    "BudgetExceededError": None,
}
LLM_ERRORS = Names(frozenset(LLM_STATUS), LLM_CLIENT)
_STATUS_FROM_SERVER = frozenset({"APIError"})

VERIFIER_FAILURES: Mapping[str, str] = {
    "VerifierTimeoutError": "verifier_timeout",
    "RewardFileNotFoundError": "reward_file_missing",
    "RewardFileEmptyError": "reward_file_empty",
    "VerifierOutputParseError": "verifier_output_invalid",
    "AddTestsDirError": "verifier_upload_failed",
    "DownloadVerifierDirError": "verifier_download_failed",
}
VERIFIER_ERRORS = Names(frozenset(VERIFIER_FAILURES), HARBOR)

AGENT_TIMEOUT = Names(frozenset({"AgentTimeoutError"}), HARBOR)

SCREENSHOT_READ = Names(frozenset({"RuntimeError"}), ("builtins",))
SCREENSHOT_READ_MESSAGE = "Could not read screenshot"
"""computer-1's screenshot read-back raises a bare RuntimeError with this text (providers/base.py)."""

STDLIB_TRANSPORT = Names(
    frozenset(
        {
            "OSError",
            "ConnectionError",
            "ConnectionResetError",
            "ConnectionRefusedError",
            "ConnectionAbortedError",
            "BrokenPipeError",
            "TimeoutError",
            "EOFError",
            "IncompleteReadError",
            "gaierror",
            "SSLError",
        }
    ),
    STDLIB,
)
"""Raw transport errors an environment's ``exec`` can raise (the screenshot read, the verifier)."""

HARBOR_SANDBOX = Names(
    frozenset(
        {
            "EnvironmentStartTimeoutError",  # separate-mode verifier environment
            "SandboxBuildFailedError",
            "HealthcheckError",
            "SandboxLikelyOutOfMemoryError",
            "MemoryLimitExceededError",
            "SSHAccessError",
            "GKEExecStreamClosedError",
            "GKEPodNotFoundError",
        }
    ),
    HARBOR,
)
"""Harbor's environment errors: after the agent started they are raw exec failures, like an SDK's."""

SESSION_DEAD = "runtime_session_dead"
"""computer-1's early-termination reason when its liveness check finds the desktop gone."""


# ---------------------------------------------------------------------------------------------------
# Conditions


def raised(group: Names) -> Callable[[OutcomeEvent], bool]:
    """Condition: the episode ended with an exception of ``group``."""
    return lambda o: group.match(o.exception)


def llm_status(o: OutcomeEvent) -> int | None:
    """The session server's HTTP status behind an escaped LLM-client error, if it had one."""
    exc = o.exception
    if exc is None or not LLM_ERRORS.match(exc):
        return None
    if exc.status_code is not None:
        return exc.status_code
    if exc.type in _STATUS_FROM_SERVER and o.gateway_statuses:
        return o.gateway_statuses[-1]
    return LLM_STATUS[exc.type]


def _screenshot_read(o: OutcomeEvent) -> bool:
    exc = o.exception
    return SCREENSHOT_READ.match(exc) and exc is not None and exc.message.startswith(SCREENSHOT_READ_MESSAGE)


def _transport(o: OutcomeEvent) -> bool:
    """A standard-library transport error, or any exception from an SDK's package."""
    exc = o.exception
    if exc is None:
        return False
    return STDLIB_TRANSPORT.match(exc) or exc.module.split(".", 1)[0].startswith(SDK)


# ---------------------------------------------------------------------------------------------------
# Verdicts


def _discard(reason: DiscardReason) -> Callable[[OutcomeEvent, RewardChoice], Verdict]:
    return lambda o, c: Discard(reason=reason.value)


def _zero(reason: str) -> Callable[[OutcomeEvent, RewardChoice], Verdict]:
    return lambda o, c: Reward(value=0.0, reason=reason)


def _zero_named(prefix: str) -> Callable[[OutcomeEvent, RewardChoice], Verdict]:
    return lambda o, c: Reward(value=0.0, reason=f"{prefix}:{o.exception.type if o.exception else '-'}")


def verifier_reward(o: OutcomeEvent, choice: RewardChoice) -> Verdict:
    """The verifier's number: ``choice.key``, else the single value, else ``choice.combine``."""
    rewards = o.rewards or {}
    if not rewards:
        return Reward(value=0.0, reason="no_reward")
    if choice.key in rewards:
        value = rewards[choice.key]
    elif len(rewards) == 1:
        (value,) = rewards.values()
    elif choice.combine == "reject":
        return Reward(value=0.0, reason="ambiguous_reward")
    else:
        values = list(rewards.values())
        combine = {"mean": lambda v: sum(v) / len(v), "min": min, "max": max, "sum": sum}[choice.combine]
        value = combine(values)
    if not math.isfinite(value):
        return Reward(value=0.0, reason="invalid_reward")
    return Reward(value=float(value), reason="ok")


# ---------------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    when: Callable[[OutcomeEvent], bool]
    then: Callable[[OutcomeEvent, RewardChoice], Verdict]
    why: str


def _failed(o: OutcomeEvent) -> bool:
    return o.exception is not None


ROWS: tuple[Row, ...] = (
    Row(
        "not_run",
        lambda o: o.exception is None and (o.early_termination_reason or "").startswith(NOT_RUN),
        lambda o, c: Discard(reason=(o.early_termination_reason or "").removeprefix(NOT_RUN)),
        "a producer refused the work at admission (e.g. already too stale to train): there is no episode",
    ),
    Row(
        "abandoned",
        raised(CANCELLED),
        _discard(DiscardReason.ABANDONED),
        "cancelled (producer shutdown): the episode did not end, so it has no outcome to learn from",
    ),
    Row(
        "sandbox_unavailable",
        lambda o: not o.agent_started,
        _discard(DiscardReason.SANDBOX_UNAVAILABLE),
        "the environment or the agent's setup failed: the policy never acted",
    ),
    Row(
        "sandbox_lost",
        raised(SANDBOX_RUNTIME),
        _discard(DiscardReason.SANDBOX_LOST),
        "computer-1 turns failed actions into observations, has no shell and clamps zoom, so an escaping "
        "RuntimeRequestError is its own screenshot command failing in the sandbox",
    ),
    Row(
        "session_dead",
        lambda o: (
            o.early_termination_reason == SESSION_DEAD
            and (o.exception is None or o.exception.phase is Phase.VERIFIER)
        ),
        _discard(DiscardReason.SANDBOX_LOST),
        "computer-1's liveness check found the desktop gone and stopped the loop without an exception; "
        'the verifier then fails in the dead sandbox (a killed container: \'service "main" is not '
        "running') or finds nothing: either way the sandbox, not the policy, ended the episode",
    ),
    Row(
        "server_unavailable",
        lambda o: llm_status(o) == 503,
        _discard(DiscardReason.SERVER_UNAVAILABLE),
        "the session server refused with 503 (draining for a weight update): not the policy's doing",
    ),
    Row(
        "token_cap",
        raised(OUTPUT_CAP),
        _zero("token_cap"),
        "finish_reason=length on every retry: the policy's reply ran past the output cap",
    ),
    Row(
        "context_overflow",
        raised(CONTEXT_OVERFLOW),
        _zero("context_overflow"),
        "the context overflowed even after reactive compaction",
    ),
    Row(
        "server_status",
        lambda o: llm_status(o) is not None,
        lambda o, c: Reward(value=0.0, reason=f"server_status:{llm_status(o)}"),
        "any other session-server 4xx/5xx (e.g. 400 temperature mismatch, 409 continuing a cut reply)",
    ),
    Row(
        "llm_error",
        raised(LLM_ERRORS),
        _zero_named("llm_error"),
        "the LLM call failed without an HTTP status (connection, client timeout, client-side validation)",
    ),
    Row(
        "agent_timeout",
        raised(AGENT_TIMEOUT),
        _zero("agent_timeout"),
        "the agent ran past its time budget",
    ),
    Row(
        "verifier_failure",
        raised(VERIFIER_ERRORS),
        lambda o, c: Reward(value=0.0, reason=VERIFIER_FAILURES[o.exception.type if o.exception else ""]),
        "the verifier timed out or left no usable reward file",
    ),
    Row(
        "screenshot_read",
        _screenshot_read,
        _zero("screenshot_read_failed"),
        "the screenshot read-back failed (rc != 0 or empty): no version-stable signal names the cause",
    ),
    Row(
        "transport",
        _transport,
        _zero_named("transport"),
        "a raw SDK or transport exception from the screenshot read or the verifier",
    ),
    Row(
        "sandbox_error",
        raised(HARBOR_SANDBOX),
        _zero_named("sandbox_error"),
        "a Harbor environment error after the agent started (an exec or verifier-environment failure)",
    ),
    Row(
        "unclassified",
        _failed,
        _zero_named("unclassified"),
        "an exception type this table does not know: scored 0, never silently a valid reward",
    ),
    Row(
        "finished",
        lambda o: True,
        verifier_reward,
        "a clean finish: the verifier's reward",
    ),
)


def classify(outcome: OutcomeEvent, choice: RewardChoice = DEFAULT_CHOICE) -> tuple[Row, Verdict]:
    """The row that decides ``outcome`` and its verdict."""
    for row in ROWS:
        if row.when(outcome):
            return row, row.then(outcome, choice)
    raise AssertionError("unreachable: the last row matches every outcome")


def score(outcome: OutcomeEvent, choice: RewardChoice = DEFAULT_CHOICE) -> Verdict:
    """The verdict on one episode."""
    return classify(outcome, choice)[1]
