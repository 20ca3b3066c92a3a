"""Debugging a run from its log, against real steps: the trainer (tiny model, real broker) trains two steps
keeping two versions' weights.

- `inspect step --recompute`: each step, measured again from the weights it started from (v0, the start
  model, for step 1; the trainer's saved v1 for step 2) with the trainer's backend, gives the loss, logprob
  gap, KL and grad norm its TrainStep recorded, and the tokens of widest trainer/engine gap with the
  engine's own logprobs. Step 2 measured from the wrong weights (v2's under v1's name) differs, loudly
  (exit 1); a version the checkpoint no longer holds is one error naming trainer.keep_versions.
- Re-training: the run's episode topics replayed under a new prefix (`cua-stream replay
  --republish-prefix`), a trainer there from the same start (`trainer.replay_batches_from`) trains the
  same groups in the same steps with the same metrics.
- The dashboard, over real HTTP: an episode's view names the step that trained it, and the step's
  `inspect` output is served (JSON and text) at the route its row links to."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
import typer
import uvicorn
from typer.testing import CliRunner

from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import build_app
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.bus.reader import scan
from cua_stream.cli.inspect import app
from cua_stream.cli.replay import replay
from cua_stream.cli.topics import app as topics_app
from cua_stream.config import BusConfig
from cua_stream.events import TrainStep
from cua_stream.topics import TRAIN_STEPS
from tests.conftest import _create_topics, free_port, wait_until
from tests.integration.gateway_servers import serving, tiny_model_dir
from tests.integration.test_inspect_step import RUN, publish

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka, pytest.mark.model, pytest.mark.slow]


def trainer_config(bus: BusConfig, model: Path, home: Path, **extra: object) -> TrainerConfig:
    return TrainerConfig(
        run_id=RUN, model_path=str(model), group_size=2, groups_per_step=1, max_staleness=1000,
        lr=1e-2, keep_versions=2, checkpoint_dir=str(home / "ckpt"), blob_dir=str(home / "blobs"),
        bus=bus, **extra,  # type: ignore[arg-type]
    )  # fmt: skip  # lr: v1 far enough from v0 that the wrong weights cannot pass for the right ones


async def train(config: TrainerConfig) -> list[TrainStep]:
    with anyio.fail_after(300):
        await Trainer(config).run()
    steps = [d.event async for d in scan(config.bus, TRAIN_STEPS) if isinstance(d.event, TrainStep)]
    return sorted(steps, key=lambda s: s.step)


@dataclass(frozen=True)
class Run:
    bus: BusConfig
    steps: list[TrainStep]
    home: Path


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Two groups of two episodes trained one group a step (two steps), for the tests of this module."""
    bus = BusConfig(
        bootstrap_servers=kafka_bootstrap, topic_prefix=f"t-{uuid.uuid4().hex[:10]}", episode_partitions=2
    )
    anyio.run(_create_topics, bus)
    anyio.run(publish, bus)
    home = tmp_path_factory.mktemp("run")
    steps = anyio.run(train, trainer_config(bus, tiny_model_dir, home, max_steps=2))
    assert [s.step for s in steps] == [1, 2]
    return Run(bus, steps, home)


def test_a_step_recomputed_from_its_start_weights_equals_its_record(run: Run, tiny_model_dir: Path) -> None:
    bus_config, steps, tmp_path = run.bus, run.steps, run.home
    checkpoint = tmp_path / "ckpt"
    assert sorted(p.name for p in checkpoint.glob("weights-v*")) == ["weights-v1", "weights-v2"]
    where = ["--bootstrap", bus_config.bootstrap_servers, "--prefix", bus_config.topic_prefix]
    model = ["--model", str(tiny_model_dir), "--blob-dir", str(tmp_path / "blobs")]
    runner = CliRunner()

    def recompute(step: int, directory: Path) -> tuple[int, str, str]:
        args = ["step", "--run", RUN, "--step", str(step), "--json", "--recompute", str(directory)]
        done = runner.invoke(app, [*args, "--top-k", "5", *model, *where])
        return done.exit_code, done.stdout, done.output

    for record in steps:
        code, stdout, output = recompute(record.step, checkpoint)
        assert code == 0, output
        again = json.loads(stdout)["recomputed"]
        assert again["agrees"] and again["start_version"] == record.step - 1
        metrics = {m["name"]: m for m in again["metrics"]}
        assert metrics["loss"]["recorded"] == record.loss
        assert metrics["grad_norm"]["recomputed"] == pytest.approx(record.metrics["grad_norm"], rel=1e-4)
        assert metrics["grad_norm"]["recomputed"] > 0  # a real backward pass, not a 0 = 0
        assert metrics["logprob_gap"]["recomputed"] == pytest.approx(record.metrics["logprob_gap"], rel=1e-4)
        gaps = again["token_gaps"]
        assert len(gaps) == 5 and gaps[0]["text"]  # decoded with the model's tokenizer
        assert [abs(g["delta"]) for g in gaps] == sorted((abs(g["delta"]) for g in gaps), reverse=True)
        for g in gaps:  # the engine's side is what the turns recorded: -1.0 - 0.1 k at completion token k
            assert round((-1.0 - g["engine"]) / 0.1, 6) % 1 == 0
            assert g["delta"] == pytest.approx(g["trainer"] - g["engine"])

    # step 2 from the weights it did not start from: the numbers say so
    wrong = tmp_path / "wrong"
    shutil.copytree(checkpoint, wrong)
    shutil.rmtree(wrong / "weights-v1")
    shutil.copytree(checkpoint / "weights-v2", wrong / "weights-v1")
    code, stdout, output = recompute(2, wrong)
    assert code == 1 and "recomputed differs from its record" in output, output
    document = json.loads(stdout)
    assert not document["recomputed"]["agrees"]
    assert {"loss", "logprob_gap"} & {
        m["name"] for m in document["recomputed"]["metrics"] if m["agrees"] is False
    }

    # as text; then a version the checkpoint no longer holds
    args = ["step", "--run", RUN, "--step", "2", "--recompute", str(checkpoint), *model, *where]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "OK: the recomputed step equals its record" in text.stdout and "Δ " in text.stdout
    print(text.stdout)  # shown with -s: what a person sees
    shutil.rmtree(wrong / "weights-v1")
    code, _, output = recompute(2, wrong)
    output = " ".join(output.split())  # the console wraps the line
    assert code == 2 and "no weights of v1" in output and "trainer.keep_versions" in output, output


def test_a_replayed_range_retrains_into_the_same_steps(
    run: Run, tiny_model_dir: Path, tmp_path: Path
) -> None:
    source = ["--bootstrap", run.bus.bootstrap_servers, "--prefix", run.bus.topic_prefix]
    replayed = f"{run.bus.topic_prefix}-replay"
    runner = CliRunner()
    for topic in ("turns", "summaries", "scores"):  # the trainer's inputs, nothing else
        done = runner.invoke(typer_app(replay), ["--topic", topic, "--republish-prefix", replayed, *source])
        assert done.exit_code == 0 and "replayed" in done.stdout, done.output
    done = runner.invoke(
        topics_app, ["create", "--bootstrap", run.bus.bootstrap_servers, "--prefix", replayed]
    )
    assert done.exit_code == 0, done.output  # the topics the trainer writes to

    bus = BusConfig(bootstrap_servers=run.bus.bootstrap_servers, topic_prefix=replayed, episode_partitions=2)
    config = trainer_config(bus, tiny_model_dir, tmp_path, replay_batches_from=run.bus.topic_prefix)
    again = anyio.run(train, config)  # stops after the recorded run's last step

    assert [(s.step, s.group_ids, s.attempts) for s in again] == [
        (s.step, s.group_ids, s.attempts) for s in run.steps
    ]
    for mine, theirs in zip(again, run.steps, strict=True):
        assert mine.loss == pytest.approx(theirs.loss, rel=1e-4)
        for name in ("grad_norm", "logprob_gap", "clip_fraction", "trained_tokens", "mean_reward"):
            assert mine.metrics[name] == pytest.approx(theirs.metrics[name], rel=1e-4, abs=1e-6), name
    assert run.steps[1].loss != pytest.approx(run.steps[0].loss, rel=1e-3)  # the steps are told apart


def typer_app(command: object) -> typer.Typer:
    app = typer.Typer()
    app.command()(command)  # type: ignore[arg-type]
    return app


@pytest.mark.anyio
async def test_the_dashboard_links_an_episode_to_its_step_and_the_step_to_its_inspect_output(
    run: Run, tiny_model_dir: Path
) -> None:
    cfg = DashboardConfig(port=free_port(), model_path=str(tiny_model_dir), bus=run.bus)
    url = f"http://127.0.0.1:{cfg.port}"
    server = uvicorn.Server(uvicorn.Config(build_app(cfg), host=cfg.host, port=cfg.port, log_level="warning"))
    last = run.steps[-1]
    episode = f"{last.group_ids[0]}-e1"
    with serving(server):
        async with httpx.AsyncClient(timeout=60) as http:

            async def read() -> bool:  # the steps, and the episode's scores and calls (all topics are read)
                summary = (await http.get(f"{url}/api/summary")).json()
                detail = await http.get(f"{url}/api/episodes/{episode}")
                return (
                    len(summary["steps"]) == 2 and detail.status_code == 200 and "trained_in" in detail.json()
                )

            with anyio.fail_after(60):
                await wait_until(read)
            summary = (await http.get(f"{url}/api/summary")).json()
            assert [(s["run_id"], s["step"]) for s in summary["steps"]] == [(RUN, 1), (RUN, 2)]
            detail = (await http.get(f"{url}/api/episodes/{episode}")).json()
            assert detail["trained_in"] == {"run_id": RUN, "step": last.step, "attempt": 0}

            route = f"{url}/api/inspect/step"
            document = (await http.get(route, params={"run": RUN, "step": last.step})).json()
            assert document["matches"] and document["rebuilt"]["group_ids"] == list(last.group_ids)
            assert document["rebuilt"]["n_samples"] == last.n_samples
            assert document["groups"][0]["episodes"][0]["samples"][0]["segments"][1]["text"]  # decoded
            text = await http.get(route, params={"run": RUN, "step": last.step, "format": "text"})
            assert text.headers["content-type"].startswith("text/plain")
            assert f"OK: the rebuilt batch is the one step {last.step} trained" in text.text
            assert f"episode {episode}" in text.text
            missing = await http.get(route, params={"run": RUN, "step": 99})
            assert missing.status_code == 404 and "has no step 99" in missing.json()["detail"]
            assert (await http.get(route, params={"run": RUN, "step": "x"})).status_code == 422
            page = (await http.get(f"{url}/app.js")).text
            assert "/api/inspect/step?run=" in page and "trained in step" in page
