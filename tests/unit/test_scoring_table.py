"""The scoring table, row by row, on outcomes built from real Harbor TrialResults and real exceptions.

Every exception below is an instance of the class Harbor, litellm or the standard library really raises
(no type names typed as strings); it is raised, recorded by Harbor's ``ExceptionInfo.from_exception``
into a ``TrialResult``, and turned into an OutcomeEvent by ``producers.outcome``. ``CASES`` names the
row each case must hit, and a test checks that every row of the table is hit.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import litellm
import msgspec
import pytest
from harbor.agents.computer_1.providers.base import screenshot_data_url
from harbor.agents.computer_1.runtime import RuntimeRequestError
from harbor.agents.installed.base import NonZeroAgentExitCodeError
from harbor.environments.base import ExecResult, HealthcheckError, SandboxBuildFailedError
from harbor.environments.gke import GKEExecStreamClosedError
from harbor.environments.modal import SandboxLikelyOutOfMemoryError
from harbor.llms.base import ContextLengthExceededError, OutputLengthExceededError
from harbor.models.trial.error_policy import ERROR_POLICIES
from harbor.trial.errors import (
    AgentSetupTimeoutError,
    AgentTimeoutError,
    EnvironmentStartTimeoutError,
    VerifierTimeoutError,
)
from harbor.verifier.verifier import (
    AddTestsDirError,
    DownloadVerifierDirError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    VerifierOutputParseError,
)

from cua_stream import scoring as table
from cua_stream.events import Discard, ExceptionRecord, OutcomeEvent, Phase, Reward, decode, encode
from cua_stream.scoring import ROWS, RewardChoice, classify, score
from tests.unit.scorer_trials import outcome, recorded, trial_result

AGENT, VERIFIER, ENV, SETUP = Phase.AGENT, Phase.VERIFIER, Phase.ENVIRONMENT, Phase.AGENT_SETUP


def llm(cls: type[Exception], **kw: object) -> Exception:
    """A litellm exception as litellm's OpenAI-compatible mapping raises it."""
    return cls(message=f"{cls.__name__}: OpenAIException - session server said no", llm_provider="openai", model="openai/qwen3-vl", **kw)  # fmt: skip


class _Sandbox:
    """The one environment call ``screenshot_data_url`` makes: ``exec`` (a fake, unit tests only)."""

    def __init__(self, reply: ExecResult | BaseException) -> None:
        self.reply = reply

    async def exec(self, command: str, **kw: object) -> ExecResult:
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


def screenshot_read_error(reply: ExecResult | BaseException) -> BaseException:
    """The exception computer-1's real screenshot read-back raises against a sandbox giving ``reply``."""
    try:
        asyncio.run(screenshot_data_url("/tmp/computer_1-screenshots/latest.webp", _Sandbox(reply)))
    except BaseException as e:
        return e
    raise AssertionError("the screenshot read succeeded")


class RuntimeRequestErrorLookalike(Exception):
    """Same name as Harbor's class, defined elsewhere: the table must not take it for Harbor's."""


RuntimeRequestErrorLookalike.__name__ = RuntimeRequestErrorLookalike.__qualname__ = "RuntimeRequestError"


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], OutcomeEvent]
    row: str
    verdict: Reward | Discard


def case(id: str, row: str, verdict: Reward | Discard, **trial: object) -> Case:
    gateway = trial.pop("gateway", {})
    return Case(id, lambda: outcome(trial_result(**trial), **gateway), row, verdict)  # type: ignore[arg-type]


def zero(reason: str) -> Reward:
    return Reward(value=0.0, reason=reason)


def discard(reason: str) -> Discard:
    return Discard(reason=reason)


OK_REWARD = {"reward": 1.0}


def _not_run(reason: str) -> Callable[[], OutcomeEvent]:
    def outcome() -> OutcomeEvent:
        from cua_stream.events import DiscardReason, TaskRef, WorkRequest
        from producers.admission import not_run_outcome

        work = WorkRequest(
            run_id="r", group_id="g", episode_id="e", task=TaskRef(name="t"), sample_index=0, group_size=2,
            policy_version=1, created_at=0.0,
        )  # fmt: skip
        return not_run_outcome(work, DiscardReason(reason), attempt=0, now=0.0)

    return outcome


CASES: list[Case] = [
    # --- refused at admission: no trial at all
    Case("not-run-stale", _not_run("stale"), "not_run", Discard(reason="stale")),
    Case("not-run-task-elsewhere", _not_run("task_not_allowed"), "not_run", discard("task_not_allowed")),
    # --- abandoned
    case("cancelled-mid-episode", "abandoned", discard("abandoned"), exc=asyncio.CancelledError(), reached=AGENT),
    case("cancelled-in-setup", "abandoned", discard("abandoned"), exc=asyncio.CancelledError(), reached=SETUP),
    # --- failures before the agent started
    case("env-start-timeout", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=EnvironmentStartTimeoutError("Environment start timed out after 600 seconds"), reached=ENV),
    case("sandbox-build-failed", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=SandboxBuildFailedError("image build failed"), reached=ENV),
    case("healthcheck", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=HealthcheckError("healthcheck failed"), reached=ENV),
    case("agent-setup-timeout", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=AgentSetupTimeoutError("Agent setup timed out after 360 seconds"), reached=SETUP),
    case("runtime-error-in-setup", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=RuntimeRequestError("setup", 127, "Xvfb: command not found", recoverable=True), reached=SETUP),
    case("x11-never-appeared", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=TimeoutError("X11 display :1 never appeared"), reached=SETUP),
    case("unknown-type-before-agent", "sandbox_unavailable", discard("sandbox_unavailable"),
         exc=ValueError("bad environment kwargs"), reached=ENV),
    # --- the harness's own screenshot command failing in the sandbox
    case("screenshot-capture-failed", "sandbox_lost", discard("sandbox_lost"),
         exc=RuntimeRequestError("screenshot", 1, "import: unable to open X server", recoverable=True), reached=AGENT),
    case("screenshot-capture-timeout", "sandbox_lost", discard("sandbox_lost"),
         exc=RuntimeRequestError("screenshot", 28, "timed out", recoverable=True), reached=AGENT),
    case("session-dead", "session_dead", discard("sandbox_lost"),
         rewards={"reward": 0.0}, metadata={"early_termination_reason": "runtime_session_dead"}),
    # a container killed before computer-1's liveness check: the loop ends quietly, then the verifier's
    # first exec fails in the dead container (seen in Docker 3 times in 11 kills)
    case("session-dead-then-verifier-fails", "session_dead", discard("sandbox_lost"),
         exc=RuntimeError('Failed to remove verifier reward files (exit code 1): service "main" is not running'),
         reached=VERIFIER, metadata={"early_termination_reason": "runtime_session_dead"}),
    # --- session server 503
    case("gateway-503", "server_unavailable", discard("server_unavailable"),
         exc=llm(litellm.ServiceUnavailableError), reached=AGENT, gateway={"gateway_statuses": (503, 503, 503)}),
    case("gateway-503-as-apierror", "server_unavailable", discard("server_unavailable"),
         exc=llm(litellm.APIError, status_code=503), reached=AGENT, gateway={"gateway_statuses": (503,)}),
    # --- overflows (scored 0 even though Harbor grades them with a valid reward)
    case("token-cap", "token_cap", zero("token_cap"),
         exc=OutputLengthExceededError("finish_reason=length", truncated_response="{"), failed_in=AGENT, rewards=OK_REWARD),
    case("context-overflow", "context_overflow", zero("context_overflow"),
         exc=ContextLengthExceededError(), failed_in=AGENT, rewards=OK_REWARD),
    case("litellm-context-window", "context_overflow", zero("context_overflow"),
         exc=llm(litellm.ContextWindowExceededError), failed_in=AGENT, rewards={"reward": 0.0}),
    # --- other session-server statuses
    case("gateway-400-temperature", "server_status", zero("server_status:400"),
         exc=llm(litellm.BadRequestError), failed_in=AGENT, rewards=OK_REWARD, gateway={"gateway_statuses": (400,)}),
    case("gateway-409-continue-cut", "server_status", zero("server_status:409"),
         exc=llm(litellm.APIError, status_code=409), failed_in=AGENT, rewards={"reward": 0.0},
         gateway={"gateway_statuses": (503, 409)}),
    case("gateway-429", "server_status", zero("server_status:429"),
         exc=llm(litellm.RateLimitError), failed_in=AGENT, rewards={"reward": 0.0}, gateway={"gateway_statuses": (429,)}),
    case("gateway-500-after-a-503", "server_status", zero("server_status:500"),
         exc=llm(litellm.InternalServerError), failed_in=AGENT, rewards={"reward": 0.0},
         gateway={"gateway_statuses": (503, 500, 500, 500)}),
    case("gateway-502", "server_status", zero("server_status:502"),
         exc=llm(litellm.BadGatewayError), failed_in=AGENT, rewards={"reward": 0.0}),
    # --- LLM call failed without an HTTP status
    case("gateway-unreachable", "llm_error", zero("llm_error:APIConnectionError"),
         exc=llm(litellm.APIConnectionError), failed_in=AGENT, rewards={"reward": 0.0}),
    case("client-timeout", "llm_error", zero("llm_error:Timeout"),
         exc=litellm.Timeout(message="read timeout", model="openai/qwen3-vl", llm_provider="openai"),
         failed_in=AGENT, rewards={"reward": 0.0}, gateway={"gateway_statuses": (503,)}),
    # --- agent budget
    case("agent-timeout", "agent_timeout", zero("agent_timeout"),
         exc=AgentTimeoutError("Agent execution timed out after 900 seconds"), failed_in=AGENT, rewards=OK_REWARD),
    # --- verifier failures
    case("verifier-timeout", "verifier_failure", zero("verifier_timeout"),
         exc=VerifierTimeoutError("Verifier execution timed out after 600 seconds")),
    case("reward-file-missing", "verifier_failure", zero("reward_file_missing"),
         exc=RewardFileNotFoundError("No reward file found at /logs/verifier/reward.txt")),
    case("reward-file-empty", "verifier_failure", zero("reward_file_empty"),
         exc=RewardFileEmptyError("Reward file is empty at /logs/verifier/reward.txt")),
    case("verifier-output-unparseable", "verifier_failure", zero("verifier_output_invalid"),
         exc=VerifierOutputParseError("reward.json is not a dict of numbers")),
    case("verifier-upload", "verifier_failure", zero("verifier_upload_failed"), exc=AddTestsDirError("upload")),
    case("verifier-download", "verifier_failure", zero("verifier_download_failed"),
         exc=DownloadVerifierDirError("download")),
    # --- raw SDK / transport exceptions from the screenshot read or the verifier
    case("screenshot-read-rc", "screenshot_read", zero("screenshot_read_failed"),
         exc=screenshot_read_error(ExecResult(return_code=1, stdout="", stderr="No such file")), reached=AGENT),
    case("screenshot-read-connection", "transport", zero("transport:ConnectionResetError"),
         exc=screenshot_read_error(ConnectionResetError(104, "Connection reset by peer")), reached=AGENT),
    case("screenshot-read-sdk", "transport", zero("transport:ReadError"),
         exc=screenshot_read_error(httpx.ReadError("stream closed")), reached=AGENT),
    case("verifier-transport", "transport", zero("transport:BrokenPipeError"), exc=BrokenPipeError(32, "Broken pipe")),
    case("verifier-sdk", "transport", zero("transport:RemoteProtocolError"),
         exc=httpx.RemoteProtocolError("peer closed connection")),
    case("gke-stream-closed", "sandbox_error", zero("sandbox_error:GKEExecStreamClosedError"),
         exc=GKEExecStreamClosedError("exec stream closed"), reached=AGENT),
    case("sandbox-oom", "sandbox_error", zero("sandbox_error:SandboxLikelyOutOfMemoryError"),
         exc=SandboxLikelyOutOfMemoryError(requested_memory_mb=4096), reached=AGENT),
    case("separate-verifier-env-start", "sandbox_error", zero("sandbox_error:EnvironmentStartTimeoutError"),
         exc=EnvironmentStartTimeoutError("verifier environment start timed out")),
    # --- exceptions the table does not know: 0, never the verifier's reward
    case("unknown-value-error", "unclassified", zero("unclassified:ValueError"),
         exc=ValueError("unexpected"), failed_in=AGENT, rewards=OK_REWARD),
    case("other-runtime-error", "unclassified", zero("unclassified:RuntimeError"),
         exc=RuntimeError("Could not write final answer"), failed_in=AGENT, rewards=OK_REWARD),
    case("installed-agent-error", "unclassified", zero("unclassified:NonZeroAgentExitCodeError"),
         exc=NonZeroAgentExitCodeError("exit 1"), failed_in=AGENT, rewards=OK_REWARD),
    case("lookalike-name", "unclassified", zero("unclassified:RuntimeRequestError"),
         exc=RuntimeRequestErrorLookalike("not Harbor's"), reached=AGENT),
    # --- clean finishes
    case("task-complete", "finished", Reward(value=1.0, reason="ok"),
         rewards={"reward": 1.0}, metadata={"early_termination_reason": "task_complete"}),
    case("task-failed", "finished", Reward(value=0.0, reason="ok"), rewards={"reward": 0}),
    case("max-turns", "finished", Reward(value=0.25, reason="ok"),
         rewards={"reward": 0.25}, metadata={"early_termination_reason": "max_turns_reached"}),
    case("single-other-key", "finished", Reward(value=0.5, reason="ok"), rewards={"accuracy": 0.5}),
    case("reward-key-among-several", "finished", Reward(value=1.0, reason="ok"), rewards={"reward": 1.0, "format": 0.0}),
    case("several-keys", "finished", zero("ambiguous_reward"), rewards={"accuracy": 1.0, "format": 0.0}),
    case("no-reward", "finished", zero("no_reward")),
    case("empty-rewards", "finished", zero("no_reward"), rewards={}),
    case("nan-reward", "finished", zero("invalid_reward"), rewards={"reward": math.nan}),
    case("inf-reward", "finished", zero("invalid_reward"), rewards={"reward": math.inf}),
    case("minus-inf-reward", "finished", zero("invalid_reward"), rewards={"reward": -math.inf}),
]  # fmt: skip


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    row, verdict = classify(c.build())
    assert (row.name, verdict) == (c.row, c.verdict)


def test_every_row_is_exercised() -> None:
    assert [r.name for r in ROWS if r.name not in {c.row for c in CASES}] == []
    assert len({r.name for r in ROWS}) == len(ROWS)


def test_cases_survive_the_wire() -> None:
    """The verdict is the same on the outcome the scorer decodes from Kafka."""
    for c in CASES:
        o = c.build()
        assert score(decode(encode(o))) == c.verdict, c.id  # type: ignore[arg-type]


def test_an_unknown_exception_never_gets_the_verifiers_reward() -> None:
    class SomethingNew(Exception):
        pass

    for phase in (AGENT, VERIFIER):
        o = outcome(trial_result(exc=SomethingNew("?"), failed_in=phase, rewards={"reward": 1.0}))
        assert score(o) == zero("unclassified:SomethingNew")


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (RewardChoice(combine="reject"), zero("ambiguous_reward")),
        (RewardChoice(combine="mean"), Reward(value=0.5, reason="ok")),
        (RewardChoice(combine="min"), Reward(value=0.25, reason="ok")),
        (RewardChoice(combine="max"), Reward(value=0.75, reason="ok")),
        (RewardChoice(combine="sum"), Reward(value=1.0, reason="ok")),
        (RewardChoice(key="format"), Reward(value=0.25, reason="ok")),
    ],
)
def test_several_reward_keys_follow_the_configured_choice(choice: RewardChoice, expected: Reward) -> None:
    o = outcome(trial_result(rewards={"accuracy": 0.75, "format": 0.25}))
    assert score(o, choice) == expected


def test_the_table_names_real_classes() -> None:
    """Every exception name in the table is a real class's name, defined in the module family its group
    requires (a group matched against the real class's own ``__module__``)."""
    import harbor.environments.singularity.singularity as singularity
    import harbor.environments.ssh as ssh
    from harbor.environments.gke import GKEPodNotFoundError

    real = (
        asyncio.CancelledError, RuntimeRequestError, OutputLengthExceededError, ContextLengthExceededError,
        litellm.ContextWindowExceededError, AgentTimeoutError, EnvironmentStartTimeoutError,
        SandboxBuildFailedError, HealthcheckError, SandboxLikelyOutOfMemoryError,
        singularity.MemoryLimitExceededError, ssh.SSHAccessError, GKEExecStreamClosedError, GKEPodNotFoundError,
        VerifierTimeoutError, RewardFileNotFoundError, RewardFileEmptyError, VerifierOutputParseError,
        AddTestsDirError, DownloadVerifierDirError, RuntimeError, OSError, ConnectionError, ConnectionResetError,
        ConnectionRefusedError, ConnectionAbortedError, BrokenPipeError, TimeoutError, EOFError,
        asyncio.IncompleteReadError, socket.gaierror, ssl.SSLError,
        *(getattr(litellm, n) for n in table.LLM_STATUS),
    )  # fmt: skip
    groups = {name: g for name, g in vars(table).items() if isinstance(g, table.Names)}
    assert len(groups) == 10
    for group_name, group in groups.items():
        for name in group.names:
            classes = [c for c in real if c.__name__ == name]
            assert classes, f"{group_name}: no real class named {name}"
            for cls in classes:
                record = ExceptionRecord(type=cls.__name__, message="", phase=AGENT, module=cls.__module__)
                assert group.match(record), (
                    f"{group_name}: {cls.__module__}.{name} is outside {group.modules}"
                )
    # litellm's own status for each status-bearing class, read off an instance
    for name, status in table.LLM_STATUS.items():
        if status is not None:
            cls = getattr(litellm, name)
            kw = {"response": httpx.Response(status, request=httpx.Request("POST", "http://gw/v1"))}
            assert llm(cls, **kw).status_code == status, name  # type: ignore[attr-defined]


def test_harbors_error_policy_names_are_all_decided() -> None:
    """Each exception Harbor's error policy knows, escaping mid-episode, hits a deliberate row. The ones
    left to ``unclassified`` are listed: they come from Harbor's installed (CLI) agents or its job
    machinery, which a computer-1 trial does not run. A new name in a Harbor upgrade fails here."""
    not_computer_1 = {
        "UnsupportedModelParametersError", "ApiError", "ApiRateLimitError", "ApiInternalServerError",
        "ApiOverloadedError", "ApiConnectionClosedError", "ApiResponseStalledError", "UnknownApiError",
        "NetworkConnectionError", "ApiConnectionError", "ApiUsageLimitError", "AgentAuthenticationError",
        "ModelNotFoundError", "ApiProviderResourceNotFoundError", "ServiceOperationsUnsupportedError",
        "VercelScopeError", "DspyImportError", "MissingExtraError", "RegradeError", "NonZeroAgentExitCodeError",
        "OutputTokenExceededError", "AgentSafetyRefusalError",
    }  # fmt: skip
    unclassified = set()
    for name in set(ERROR_POLICIES) - {"AgentSetupTimeoutError"}:  # only ever before the agent starts
        exc = ExceptionRecord(type=name, message="", phase=AGENT, module="")
        o = msgspec.structs.replace(outcome(trial_result(rewards={"reward": 1.0})), exception=exc)
        row, verdict = classify(o)
        assert not (isinstance(verdict, Reward) and verdict.reason == "ok"), name
        if row.name == "unclassified":
            unclassified.add(name)
    assert unclassified == not_computer_1


def test_the_producer_records_the_class_module_and_runtime_status() -> None:
    o = outcome(trial_result(exc=RuntimeRequestError("screenshot", 28, "timed out"), reached=AGENT))
    assert o.exception == ExceptionRecord(
        type="RuntimeRequestError",
        message="Runtime action 'screenshot' failed (28): timed out",
        phase=AGENT,
        module=RuntimeRequestError.__module__,
        status_code=28,
    )
    lookalike = outcome(trial_result(exc=RuntimeRequestErrorLookalike("x"), reached=AGENT)).exception
    assert lookalike is not None and lookalike.module == __name__
    assert outcome(trial_result(exc=recorded(ConnectionResetError()))).exception.module == "builtins"  # type: ignore[union-attr]


def status_from_session_server(status: int) -> BaseException:
    """What litellm (the client computer-1's LiteLLM wraps) raises when the session server answers
    ``status``: a real request to a real HTTP server on 127.0.0.1."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.dumps({"error": {"message": "refused", "type": "session"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        asyncio.run(
            litellm.acompletion(
                model="openai/qwen3-vl",
                api_base=f"http://127.0.0.1:{server.server_port}/v1",
                api_key="session-key",
                messages=[{"role": "user", "content": "click"}],
                num_retries=0,
                max_retries=0,
            )
        )
    except Exception as e:
        return e
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    raise AssertionError(f"status {status} did not raise")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (503, discard("server_unavailable")),
        (409, zero("server_status:409")),
        (400, zero("server_status:400")),
        (500, zero("server_status:500")),
        (502, zero("server_status:502")),
    ],
)
def test_session_server_statuses_through_the_real_client(status: int, expected: Reward | Discard) -> None:
    exc = status_from_session_server(status)
    o = outcome(
        trial_result(exc=exc, failed_in=AGENT, rewards={"reward": 1.0}), gateway_statuses=(status,) * 3
    )
    assert score(o) == expected


def test_the_table_is_pure() -> None:
    """The table module pulls in no Kafka, async runtime, Harbor or LLM client (a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys, cua_stream.scoring; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiokafka', 'anyio', 'harbor', 'litellm'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
