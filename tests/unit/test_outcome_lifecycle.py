"""Outcomes from real Harbor trials: ``Trial.create`` + ``trial.run()`` decide the timeline, record the
exception and run the real verifier; ``producers.outcome`` transcribes the TrialResult; the table scores it.

The two doubles are the outside world Harbor reaches through its plug-in points: ``ScriptedSandbox`` (a
BaseEnvironment whose ``exec`` succeeds and whose ``/logs/verifier`` download holds a scripted reward file)
and ``ScriptedAgent`` (a BaseAgent that raises a real exception where told). Everything between them
(phases, timeouts, error policy, grading, reward parsing) is Harbor 0.26.0's own code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import litellm
import pytest
from harbor.agents.base import BaseAgent
from harbor.agents.computer_1.runtime import RuntimeRequestError
from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.llms.base import OutputLengthExceededError
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.trial.trial import Trial

from cua_stream.events import Discard, Phase, Reward
from cua_stream.scoring import classify
from producers.outcome import outcome_from_trial
from tests.unit.scorer_trials import work_of

pytestmark = [
    pytest.mark.harbor,
    pytest.mark.anyio,
    # Harbor 0.26.0's own Trial calls its deprecated Task.checksum; not ours to fix.
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]

FAILURES: dict[str, Callable[[], BaseException]] = {
    "sandbox_build": lambda: SandboxBuildFailedError("image build failed"),
    "setup_runtime": lambda: RuntimeRequestError("setup", 127, "Xvfb: command not found", recoverable=True),
    "screenshot": lambda: RuntimeRequestError("screenshot", 1, "import: unable to open X server"),
    "token_cap": lambda: OutputLengthExceededError("finish_reason=length", truncated_response="{"),
    "reset": lambda: ConnectionResetError(104, "Connection reset by peer"),
    "gateway_503": lambda: litellm.ServiceUnavailableError(
        message="ServiceUnavailableError: OpenAIException - draining", llm_provider="openai", model="m"
    ),
}


class ScriptedSandbox(BaseEnvironment):
    """A sandbox whose commands all succeed; ``reward`` is what the verifier leaves in reward.txt
    (None: no file)."""

    def __init__(
        self, *args: Any, start_fail: str | None = None, reward: str | None = "1", **kw: Any
    ) -> None:
        self.start_fail = start_fail
        self.reward = reward
        super().__init__(*args, **kw)

    @staticmethod
    def type() -> str:
        return "scripted"

    def _validate_definition(self) -> None:
        pass

    async def start(self, force_build: bool) -> None:
        if self.start_fail:
            raise FAILURES[self.start_fail]()

    async def stop(self, delete: bool) -> None:
        pass

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        pass

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        pass

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        pass

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        if source_dir.rstrip("/") == "/logs/verifier" and self.reward is not None:
            await anyio.Path(target_dir).mkdir(parents=True, exist_ok=True)
            await (anyio.Path(target_dir) / "reward.txt").write_text(self.reward)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        return ExecResult(return_code=0, stdout="", stderr="")


class ScriptedAgent(BaseAgent):
    """Raises ``FAILURES[setup_fail]`` in setup or ``FAILURES[run_fail]`` in run; records computer-1's
    metadata keys otherwise."""

    def __init__(
        self,
        *args: Any,
        setup_fail: str | None = None,
        run_fail: str | None = None,
        termination: str = "task_complete",
        **kw: Any,
    ) -> None:
        self.setup_fail, self.run_fail, self.termination = setup_fail, run_fail, termination
        super().__init__(*args, **kw)

    @staticmethod
    def name() -> str:
        return "scripted"

    def version(self) -> str:
        return "1"

    async def setup(self, environment: BaseEnvironment) -> None:
        if self.setup_fail:
            raise FAILURES[self.setup_fail]()

    async def run(self, instruction: str, environment: BaseEnvironment, context: Any) -> None:
        context.metadata = {"n_episodes": 3, "early_termination_reason": self.termination}
        if self.run_fail:
            raise FAILURES[self.run_fail]()


async def run_trial(tmp_path: Path, *, env: dict[str, Any], agent: dict[str, Any]) -> TrialResult:
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "task.toml").write_text('[task]\nname = "demo/open-settings"\n')
    (task / "instruction.md").write_text("Open the settings page.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    config = TrialConfig(
        task=TaskConfig(path=task),
        trials_dir=tmp_path / "trials",
        agent=AgentConfig(name=None, import_path=f"{__name__}:ScriptedAgent", kwargs=agent),
        environment=EnvironmentConfig(import_path=f"{__name__}:ScriptedSandbox", kwargs=env),
    )
    trial = await Trial.create(config)
    with anyio.fail_after(60):
        return await trial.run()


TRIALS = [
    # id, env kwargs, agent kwargs, expected phase (None: clean), expected row, expected verdict
    ("env-start-fails", {"start_fail": "sandbox_build"}, {}, Phase.ENVIRONMENT, "sandbox_unavailable",
     Discard(reason="sandbox_unavailable")),
    ("setup-fails", {}, {"setup_fail": "setup_runtime"}, Phase.AGENT_SETUP, "sandbox_unavailable",
     Discard(reason="sandbox_unavailable")),
    ("screenshot-capture-fails", {}, {"run_fail": "screenshot"}, Phase.AGENT, "sandbox_lost",
     Discard(reason="sandbox_lost")),
    ("gateway-503", {}, {"run_fail": "gateway_503"}, Phase.AGENT, "server_unavailable",
     Discard(reason="server_unavailable")),
    ("token-cap-then-graded", {}, {"run_fail": "token_cap"}, Phase.AGENT, "token_cap",
     Reward(value=0.0, reason="token_cap")),
    ("raw-transport-then-graded", {}, {"run_fail": "reset"}, Phase.AGENT, "transport",
     Reward(value=0.0, reason="transport:ConnectionResetError")),
    ("clean", {"reward": "1"}, {}, None, "finished", Reward(value=1.0, reason="ok")),
    ("reward-file-missing", {"reward": None}, {}, Phase.VERIFIER, "verifier_failure",
     Reward(value=0.0, reason="reward_file_missing")),
    ("reward-file-empty", {"reward": ""}, {}, Phase.VERIFIER, "verifier_failure",
     Reward(value=0.0, reason="reward_file_empty")),
    ("session-dead", {"reward": "0"}, {"termination": "runtime_session_dead"}, None, "session_dead",
     Discard(reason="sandbox_lost")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "agent", "phase", "row", "verdict"), [t[1:] for t in TRIALS], ids=[t[0] for t in TRIALS]
)
async def test_real_trial(tmp_path: Path, env: dict, agent: dict, phase: Phase | None, row: str, verdict: object) -> None:  # fmt: skip
    result = await run_trial(tmp_path, env=env, agent=agent)
    o = outcome_from_trial(result, work_of("r", "g", "e", 1), gateway_statuses=(503, 503, 503))
    assert (o.exception.phase if o.exception else None) == phase
    assert o.agent_started == (phase not in (Phase.ENVIRONMENT, Phase.AGENT_SETUP))
    chosen, got = classify(o)
    assert (chosen.name, got) == (row, verdict)
    # the same outcome from the result.json Harbor wrote
    stored = TrialResult.model_validate_json(
        (Path(result.trial_uri.removeprefix("file://")) / "result.json").read_text()
    )
    assert outcome_from_trial(stored, work_of("r", "g", "e", 1), gateway_statuses=(503, 503, 503)) == o


async def test_harbor_trusts_a_raw_transport_error_the_table_does_not(tmp_path: Path) -> None:
    """Harbor's error-policy trap: it grades an unlisted exception and calls its reward valid."""
    result = await run_trial(tmp_path, env={"reward": "1"}, agent={"run_fail": "reset"})
    assert result.reward_valid and result.verifier_result and result.verifier_result.rewards == {"reward": 1}
    o = outcome_from_trial(result, work_of("r", "g", "e", 1))
    assert o.rewards == {"reward": 1.0} and o.n_turns == 3
    assert classify(o)[1] == Reward(value=0.0, reason="transport:ConnectionResetError")
