"""Metrics sinks: a run's TrainStep and GroupDropped records as TensorBoard / W&B scalars, each step once
(the mapping, the writers read back with each library's own reader, and the trainer's live sinks)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from consumers.trainer.config import TrainerConfig
from consumers.trainer.sinks import TrainerSinks
from cua_stream.config import ConfigError
from cua_stream.events import Event, GroupDropped, TaskRef, TrainStep, WorkRequest, to_json
from cua_stream.metrics_sinks import SinkSpec, charge, step_scalars, tag_of
from cua_stream.metrics_writers import WANDB_MARKER, MetricsSink, TensorBoardWriter, WandbWriter


def step(n: int, *, reward: float = 0.5) -> TrainStep:
    return TrainStep(
        run_id="r1",
        step=n,
        policy_version=n,
        n_groups=2,
        n_episodes=8,
        n_samples=10,
        loss=0.1 * n,
        group_ids=(f"s{n}a", f"s{n}b"),
        metrics={"grad_norm": 1.5, "mean_reward": reward, "kl": 0.01, "lr": 1e-5, "train_s": 2.0},
        finished_at=1000.0 + n,
    )


def work(group: str, version: int) -> WorkRequest:
    return WorkRequest(run_id="r1", group_id=group, episode_id=f"{group}-0", task=TaskRef(name="click-button"),
                       sample_index=0, group_size=1, policy_version=version, created_at=0.0)  # fmt: skip


def drop(group: str, version: int, reason: str = "stale") -> GroupDropped:
    return GroupDropped(run_id="r1", group_id=group, reason=reason, trainer_version=version, dropped_at=9.0)


def log_order() -> list[Event]:
    """As the trainer publishes them: each commit's step, then the drops decided while it was gathered
    (at the version before it); then drops after the last step, published by the stop's commit."""
    return [
        step(1),
        drop("g1", 0),
        step(2, reward=0.75),
        drop("g2", 1),
        drop("g3", 1, "timeout"),
        step(3),
        drop("g9", 3, "timeout"),
    ]


def test_a_step_maps_to_its_scalars_at_its_step_and_finish_time() -> None:
    got = {
        s.tag: s
        for s in step_scalars(step(2, reward=0.75), [drop("a", 1), drop("b", 1), drop("c", 1, "timeout")])
    }
    assert {t: s.value for t, s in got.items()} == {
        "train/loss": pytest.approx(0.2),
        "train/policy_version": 2.0,
        "train/n_groups": 2.0,
        "train/n_episodes": 8.0,
        "train/n_samples": 10.0,
        "train/grad_norm": 1.5,
        "train/reward_mean": 0.75,
        "train/kl": 0.01,
        "train/lr": 1e-5,
        "time/train_s": 2.0,
        "drops/total": 3.0,
        "drops/stale": 2.0,
        "drops/timeout": 1.0,
    }
    assert {(s.step, s.wall_time) for s in got.values()} == {(2, 1002.0)}
    # step 2 trained with v1's weights: a group issued under v1 lagged 0 versions, one under v0 lagged 1
    lags = {s.tag: s.value for s in step_scalars(step(2), [], {"s2a": 1, "s2b": 0, "other": 0})}
    assert (lags["staleness/mean"], lags["staleness/max"]) == (0.5, 1.0)
    assert tag_of("save_s") == "time/save_s" and tag_of("new_metric") == "train/new_metric"


def test_drops_count_at_the_step_they_were_published_with_and_late_ones_wait() -> None:
    charged = charge([*log_order(), step(2), drop("g2", 1)])  # a republished commit counts once
    assert [(s.step, sorted(d.group_id for d in ds)) for s, ds in charged.steps] == [
        (1, ["g1"]),
        (2, ["g2", "g3"]),
        (3, []),
    ]
    assert [d.group_id for d in charged.waiting] == ["g9"]
    assert charge([work("s1a", 0), work("s1a", 0), step(1)]).issued == {"s1a": 0}


@pytest.mark.parametrize("text", ["tensorboard", "tensorboard:", "mlflow:/tmp/x", "/tmp/x", "wandb"])
def test_a_bad_sink_is_refused_naming_the_field(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"trainer\.metrics_sinks: .*tensorboard, wandb"):
        TrainerConfig(run_id="r1", model_path=str(tmp_path), metrics_sinks=[text])
    ok = TrainerConfig(
        run_id="r1", model_path=str(tmp_path), metrics_sinks=["tensorboard:/tmp/tb", "wandb:w"]
    )
    assert SinkSpec.parse(ok.metrics_sinks[1]) == SinkSpec("wandb", Path("w"))


def tensorboard_points(run_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar point under ``run_dir``, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()[SCALARS]}


def test_tensorboard_files_hold_each_step_once_across_writers(tmp_path: Path) -> None:
    first = MetricsSink(TensorBoardWriter(tmp_path, "r1"))
    assert first.write(log_order()[:5]) == [1, 2]
    first.close()
    again = MetricsSink(TensorBoardWriter(tmp_path, "r1"))  # a second export, or a restarted trainer
    assert again.write(log_order()) == [3]
    assert again.write(log_order()) == []
    again.close()
    points = tensorboard_points(tmp_path / "r1")
    assert points["train/reward_mean"] == [(1, 0.5, 1001.0), (2, 0.75, 1002.0), (3, 0.5, 1003.0)]
    assert points["drops/stale"] == [(1, 1.0, 1001.0), (2, 1.0, 1002.0)]
    assert points["drops/timeout"] == [(2, 1.0, 1002.0)]
    assert [p[1] for p in points["drops/total"]] == [1.0, 2.0, 0.0]
    for tag, got in points.items():
        assert len({p[0] for p in got}) == len(got), f"{tag}: a step written twice"


def wandb_history(root: Path) -> list[dict[str, float]]:
    """The history rows of every offline run under ``root``, in write order: each ``run-*.wandb`` file
    (LevelDB-log framed, after a 7-byte ``:W&B`` header) decoded with wandb's own protobuf ``Record``.
    wandb 0.31 ships no Python reader of these files (its Go core reads them), hence the framing here."""
    import json

    from wandb.proto import wandb_internal_pb2

    rows = []
    for path in sorted(root.glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B"
        pos, payload = 7, b""
        while pos + 7 <= len(data):
            left_in_block = 32768 - pos % 32768
            if left_in_block < 7:  # a block's tail too short for a header is padding
                pos += left_in_block
                continue
            length, kind = struct.unpack_from("<HB", data, pos + 4)
            if (kind == 0 and length == 0) or pos + 7 + length > len(data):
                break  # the end, or a record wandb-core is still writing
            payload += data[pos + 7 : pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):  # a whole record, or the last piece of one
                record = wandb_internal_pb2.Record()
                record.ParseFromString(payload)
                payload = b""
                if record.WhichOneof("record_type") == "history":
                    row = {
                        i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item
                    }
                    rows.append(row | {"step": record.history.step.num})
    return rows


def wandb_files(root: Path) -> list[tuple[str, int]]:
    return [(str(p.relative_to(root)), p.stat().st_size) for p in sorted(root.glob("wandb/offline-run-*/*"))]


def wandb_history_settled(root: Path, rows: int, within_s: float = 30.0) -> list[dict[str, float]]:
    """The history once it holds ``rows`` rows, or as it is after ``within_s``. wandb-core, a process of
    its own, writes the file; once in a loaded CI run the last writer's step was missing right after
    ``finish()`` returned (not reproduced alone or under CPU load), so the read waits for the writer
    instead of racing it. A step written twice or never still fails."""
    deadline = time.monotonic() + within_s
    while len(got := wandb_history(root)) < rows and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_an_offline_wandb_run_holds_each_step_once_across_writers(tmp_path: Path) -> None:
    first = MetricsSink(WandbWriter(tmp_path, "r1"))
    assert first.write(log_order()[:5]) == [1, 2]
    first.close()
    again = MetricsSink(WandbWriter(tmp_path, "r1"))
    assert again.write(log_order()) == [3]
    again.close()
    rows = wandb_history_settled(tmp_path, rows=3)
    assert [r["step"] for r in rows] == [1, 2, 3], wandb_files(tmp_path)
    assert [r["train/reward_mean"] for r in rows] == [0.5, 0.75, 0.5]
    assert rows[1]["drops/timeout"] == 1.0 and rows[1]["time/finished_at"] == 1002.0
    assert (tmp_path / WANDB_MARKER).read_text() == '{"r1": 3}'


def test_the_trainers_live_sink_survives_a_restart_and_a_broken_sink(tmp_path: Path) -> None:
    good, bad = tmp_path / "tb", tmp_path / "file"
    bad.write_text("not a directory")
    records = log_order()
    commits = [records[0:2], records[2:5], records[5:6], records[6:]]  # as the trainer commits them
    sinks = TrainerSinks([f"tensorboard:{good}", f"tensorboard:{bad}"], "r1")
    for commit in commits[:2]:
        sinks.write(commit)  # the broken sink logs; training goes on
    # the trainer crashes after commit 2's records were published and written, and replays commit 2
    restarted = TrainerSinks([f"tensorboard:{good}"], "r1")
    for commit in commits[1:]:
        restarted.write(commit)
    restarted.close()
    points = tensorboard_points(good / "r1")
    assert [p[0] for p in points["train/loss"]] == [1, 2, 3]
    assert [p[0] for p in points["drops/total"]] == [1, 2, 3]


def test_a_trainer_killed_before_its_sinks_wrote_a_step_writes_it_at_the_restart(tmp_path: Path) -> None:
    records = log_order()
    sinks = TrainerSinks([f"tensorboard:{tmp_path}"], "r1")
    sinks.write(records[0:2])
    sinks.close()  # killed after step 2's checkpoint: its records are pending, never seen by the sink
    restarted = TrainerSinks([f"tensorboard:{tmp_path}"], "r1")
    restarted.write_pending([to_json(r).decode() for r in records[2:5]])
    restarted.write_pending([to_json(r).decode() for r in records[2:5]])  # and killed again
    restarted.write(records[5:6])
    restarted.close()
    points = tensorboard_points(tmp_path / "r1")
    assert [p[0] for p in points["train/loss"]] == [1, 2, 3]
    assert points["drops/timeout"] == [(2, 1.0, 1002.0)]
