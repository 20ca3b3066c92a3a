"""A real Harbor ``Trial`` on the local desktop: Qwen3VLComputer1 through the binding drives the desktop
(Xvfb, xfce4, Chromium in the episode's namespaces), talking to the session gateway and the reference
engine (tiny Qwen3-VL); the verifier runs in the environment; the outcome built from the TrialResult is
scored. Every call of the episode is on the turn topic."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from harbor.models.trial.config import EnvironmentConfig, TaskConfig, TrialConfig
from harbor.trial.trial import Trial

from cua_stream.binding.computer1 import Computer1Params, ServedModel, bind_computer1
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig
from cua_stream.engine.config import EngineConfig
from cua_stream.events import TurnEvent
from cua_stream.gateway.config import GatewayConfig
from cua_stream.scoring import classify
from cua_stream.topics import TURNS
from producers.outcome import outcome_from_trial
from tests.conftest import free_port
from tests.integration.gateway_servers import serving, tiny_model_dir
from tests.unit.scorer_trials import work_of

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.desktop,
    pytest.mark.kafka,
    pytest.mark.model,
    # Harbor 0.26's own Trial warns about its task checksum API
    pytest.mark.filterwarnings("ignore:Task.checksum will be deprecated:DeprecationWarning"),
]


def task(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "task.toml").write_text('[task]\nname = "cua/press-ok"\n')
    (root / "instruction.md").write_text("Press the OK button on the page.\n")
    # the verifier runs inside the episode: it sees its own /logs and /tests
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\ntest -s /logs/agent/trajectory.json && echo 0 > /logs/verifier/reward.txt\n"
    )
    return root


async def test_a_trial_runs_computer1_on_the_local_desktop_through_the_gateway(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from cua_stream.engine.server import build_server as engine_server
    from cua_stream.gateway.server import build_server as gateway_server

    engine = EngineConfig(model_path=str(tiny_model_dir), port=free_port())
    gateway = GatewayConfig(
        model_path=str(tiny_model_dir),
        engine_url=f"http://127.0.0.1:{engine.port}",
        port=free_port(),
        blob_dir=str(tmp_path / "blobs"),
    )
    url = f"http://127.0.0.1:{gateway.port}"
    with serving(engine_server(engine)), serving(gateway_server(gateway, bus_config)):
        async with httpx.AsyncClient() as http:
            session = {
                "run_id": "desk",
                "group_id": "g0",
                "episode_id": "g0-e0",
                "sampling": {"temperature": 1.0, "max_new_tokens": 48},
            }
            sid = (await http.post(f"{url}/sessions", json=session)).json()["session_id"]
            params = Computer1Params(
                session_url=f"{url}/sessions/{sid}/v1",
                session_key="per-episode-key",
                temperature=1.0,
                model=ServedModel(name="tiny-qwen3-vl", max_input_tokens=100_000, max_output_tokens=48),
                request_args={"max_tokens": 48},
                max_turns=2,
                desktop_width=640,
                desktop_height=480,
                agent_timeout_sec=300,
            )
            config = TrialConfig(
                task=TaskConfig(path=task(tmp_path / "task")),
                trials_dir=tmp_path / "trials",
                agent=bind_computer1(params, {}).trial_agent_config(),
                environment=EnvironmentConfig(
                    import_path="cua_stream.desktop.environment:LocalDesktopEnvironment"
                ),
            )
            with anyio.fail_after(300):
                result = await (await Trial.create(config)).run()
            report = (await http.get(f"{url}/sessions/{sid}")).json()
    assert result.exception_info is None, result.exception_info.exception_traceback[-2000:]
    assert result.verifier_result is not None and result.verifier_result.rewards == {"reward": 0.0}
    outcome = outcome_from_trial(result, work_of("desk", "g0", "g0-e0", 0), n_calls=report["n_calls"])
    row, verdict = classify(outcome)
    assert outcome.agent_started and row.name == "finished" and verdict.value == 0.0  # type: ignore[union-attr]
    turns = [d.event async for d in scan(bus_config, TURNS) if isinstance(d.event, TurnEvent)]
    assert len(turns) == report["n_calls"] >= 1 and {t.episode_id for t in turns} == {"g0-e0"}
    assert all(t.images for t in turns if t.parent_call_id is None)  # the desktop's screenshot went in
