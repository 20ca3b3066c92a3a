"""`cua-stream export-metrics` against a real broker: a run's steps and drops, read from the train_steps
topic, written as scalars; a second export (or one after the trainer's live sink) writes no step twice."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from consumers.trainer import checkpoint as ckpt
from consumers.trainer.config import TrainerConfig
from consumers.trainer.daemon import Trainer
from cua_stream.bus.producer import EventProducer
from cua_stream.config import BusConfig
from cua_stream.events import WorkRequest
from cua_stream.topics import TRAIN_STEPS, WORK
from tests.integration.gateway_servers import tiny_model_dir
from tests.integration.test_replay_tap import cli
from tests.integration.test_trainer_drops import HeldClock, until
from tests.integration.test_trainer_drops import publish as publish_groups
from tests.integration.test_trainer_resume import RUN
from tests.unit.test_metrics_sinks import (
    drop,
    log_order,
    step,
    tensorboard_points,
    wandb_history_settled,
    work,
)

__all__ = ["tiny_model_dir"]  # fixture

pytestmark = [pytest.mark.kafka]

REASONS = ("discarded", "zero_variance", "stale", "timeout")


async def publish(bus: BusConfig, records: list) -> None:
    async with EventProducer(bus) as producer:
        for record in records:
            await producer.publish(WORK if isinstance(record, WorkRequest) else TRAIN_STEPS, record)


@pytest.mark.anyio
async def test_export_metrics_writes_each_step_once(bus_config: BusConfig, tmp_path: Path) -> None:
    other_run = [msgspec.structs.replace(step(n), run_id="r2", loss=99.0) for n in (1, 2, 3, 4)]
    # each step's two groups: one issued under the weights it trained (lag 0), one a version earlier
    issued = [work(f"s{n}{g}", max(0, n - 1 - lag)) for n in (1, 2, 3, 4) for g, lag in (("a", 0), ("b", 1))]
    await publish(bus_config, [*issued, *log_order()[:5], *other_run])
    tb, wb = tmp_path / "tb", tmp_path / "wb"

    first = cli(bus_config, "export-metrics", "--run", "r1", "--to", "tensorboard", str(tb))
    assert first.returncode == 0, first.stderr
    assert "wrote 2 of 2 step(s) (steps 1..2)" in first.stdout
    again = cli(bus_config, "export-metrics", "--run", "r1", "--to", "tensorboard", str(tb))
    assert again.returncode == 0, again.stderr
    assert "wrote 0 of 2 step(s) (no new step)" in again.stdout

    await publish(bus_config, [*log_order()[5:], step(4), drop("g10", 3, "invalid_records")])
    later = cli(bus_config, "export-metrics", "--run", "r1", "--to", "tensorboard", str(tb))
    assert "wrote 2 of 4 step(s) (steps 3..4)" in later.stdout, later.stdout + later.stderr

    points = tensorboard_points(tb / "r1")
    for tag, got in points.items():
        assert len({p[0] for p in got}) == len(got), f"{tag}: a step written twice: {got}"
    assert [p[0] for p in points["train/loss"]] == [1, 2, 3, 4]
    assert [p[1] for p in points["train/loss"]] == pytest.approx([0.1, 0.2, 0.3, 0.4])  # float32 on disk
    assert [(s, v) for s, v, _ in points["drops/timeout"]] == [(2, 1.0), (4, 1.0)]
    assert [(s, v) for s, v, _ in points["drops/invalid_records"]] == [(4, 1.0)]
    assert [(s, v) for s, v, _ in points["staleness/max"]] == [(1, 0.0), (2, 1.0), (3, 1.0), (4, 1.0)]
    assert not (tb / "r2").exists()

    for _ in range(2):
        exported = cli(bus_config, "export-metrics", "--run", "r1", "--to", "wandb", str(wb))
        assert exported.returncode == 0, exported.stderr
    assert "wrote 0 of 4 step(s)" in exported.stdout
    assert [r["step"] for r in wandb_history_settled(wb, rows=4)] == [1, 2, 3, 4]


def test_export_metrics_refuses_an_unknown_kind(bus_config: BusConfig, tmp_path: Path) -> None:
    result = cli(bus_config, "export-metrics", "--run", "r1", "--to", "mlflow", str(tmp_path))
    assert result.returncode == 2
    assert "expected KIND:DIR with KIND one of tensorboard, wandb" in result.stderr


@pytest.mark.model
@pytest.mark.anyio
async def test_the_trainers_live_sink_and_an_export_agree(
    bus_config: BusConfig, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The real trainer (tiny model) with ``trainer.metrics_sinks``: its step and the drops charged to it
    are in the live directory as an export into a new one writes them, and an export into the live
    directory writes nothing again."""
    await publish_groups(bus_config)
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    (checkpoints / ckpt.FILE).write_bytes(msgspec.json.encode(ckpt.Checkpoint(run_id=RUN, version=5, step=5)))
    live, fresh = tmp_path / "live", tmp_path / "fresh"
    config = TrainerConfig(
        run_id=RUN,
        model_path=str(tiny_model_dir),
        group_size=2,
        groups_per_step=2,
        filter_zero_variance=True,
        group_timeout_s=3.0,
        checkpoint_dir=str(checkpoints),
        blob_dir=str(tmp_path / "blobs"),
        metrics_sinks=[f"tensorboard:{live}"],
        bus=bus_config,
    )
    clock = HeldClock()  # the timed-out group times out once the others are decided (test_trainer_drops)
    trainer = Trainer(config, clock=clock)
    stop = anyio.Event()

    def dropped(reasons: tuple[str, ...]) -> int:
        return sum(trainer.metrics.drops.value(reason=r) for r in reasons)

    async def decided() -> None:
        await until(lambda: trainer.state.step == 6 and dropped(REASONS) == 3)
        assert dropped(("timeout",)) == 0
        clock.move_past(config.group_timeout_s)
        await until(lambda: dropped(REASONS) == 4)
        stop.set()

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(decided)
            await trainer.run(stop=stop)

    exported = cli(bus_config, "export-metrics", "--run", RUN, "--to", "tensorboard", str(fresh))
    assert exported.returncode == 0, exported.stderr
    assert "wrote 1 of 1 step(s) (steps 6..6)" in exported.stdout
    assert tensorboard_points(live / RUN) == tensorboard_points(fresh / RUN)
    points = tensorboard_points(live / RUN)
    charged = sum(
        v
        for tag, got in points.items()
        if tag != "drops/total" and tag.startswith("drops/")
        for _, v, _ in got
    )
    assert points["drops/total"] == [(6, charged, points["train/loss"][0][2])]
    assert "staleness/max" not in points  # these groups' work was never issued on the work topic
    again = cli(bus_config, "export-metrics", "--run", RUN, "--to", "tensorboard", str(live))
    assert "wrote 0 of 1 step(s)" in again.stdout, again.stdout + again.stderr
