"""The trainer's checkpoint: enough to restart after a kill -9 losing no group and training none twice.

A checkpoint is a directory of files written before the one that commits them: the weights (also what
the engine loads), the optimizer state, and ``checkpoint.json`` last, by atomic rename. The JSON holds
the step and policy version, every group decided (trained or dropped), the input offsets to resume
from and those read up to, how many groups the feeder issued, and the records the step must publish (``pending``): they are
published after the checkpoint is durable, and a restart publishes those the log does not hold yet.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import msgspec
import torch

from cua_stream.errors import ConfigError

FILE = "checkpoint.json"


class Checkpoint(msgspec.Struct, kw_only=True):
    """``checkpoint.json``: a file format of its own (versioned), not a record on a topic."""

    schema_version: int = 1
    run_id: str
    step: int = 0
    version: int = 0
    weights: str = ""
    """Directory (relative to the checkpoint dir) of the weights of ``version``; empty: the start model."""
    optimizer: str = ""
    decided: list[str] = []
    offsets: list[tuple[str, int, int]] = []
    """(topic, partition, offset) to resume each input partition from."""
    read_to: list[tuple[str, int, int]] = []
    """(topic, partition, offset) each input partition was read up to: an undecodable record before it
    was dead-lettered by this checkpoint or an earlier one (a restart reading it again skips it)."""
    issued: int = 0
    """Groups the feeder issued (indices 0..issued-1)."""
    pending: list[str] = []
    """Records to publish (JSON of events), checked against the log on restart."""


def load(directory: Path) -> Checkpoint | None:
    path = directory / FILE
    if not path.exists():
        return None
    try:
        checkpoint = msgspec.json.decode(path.read_bytes(), type=Checkpoint)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ConfigError(f"{path}: not a cua-stream trainer checkpoint ({e})") from None
    if checkpoint.schema_version != 1:
        raise ConfigError(f"{path}: checkpoint schema {checkpoint.schema_version}; this trainer reads 1")
    return checkpoint


def optimizer_state(directory: Path, checkpoint: Checkpoint) -> dict[str, Any] | None:
    if not checkpoint.optimizer:
        return None
    return torch.load(directory / checkpoint.optimizer, weights_only=True)


def save(
    directory: Path, checkpoint: Checkpoint, optimizer: dict[str, Any], *, keep_versions: int = 1
) -> None:
    """Write the optimizer state, then commit ``checkpoint`` (its weights directory is already written);
    files of older versions go once the new checkpoint is durable, except the weights of the last
    ``keep_versions`` versions (``trainer.keep_versions``: what ``inspect step --recompute`` loads)."""
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint.optimizer = f"optimizer-v{checkpoint.version}.pt"
    torch.save(optimizer, directory / (checkpoint.optimizer + ".tmp"))
    os.replace(directory / (checkpoint.optimizer + ".tmp"), directory / checkpoint.optimizer)
    commit(directory, checkpoint)
    keep = {checkpoint.weights, checkpoint.optimizer, FILE}
    for path in directory.iterdir():
        if path.name in keep or not path.name.startswith(("weights-v", "optimizer-v")):
            continue
        if path.name.startswith("weights-v") and retained(path.name, checkpoint.version, keep_versions):
            continue
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def commit(directory: Path, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint.json`` durably, by atomic rename: the files it names must be written already."""
    tmp = directory / (FILE + ".tmp")
    with tmp.open("wb") as f:
        f.write(msgspec.json.encode(checkpoint))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / FILE)


def weights_name(version: int) -> str:
    """The directory (in the checkpoint dir) of ``version``'s weights."""
    return f"weights-v{version}"


def retained(name: str, version: int, keep_versions: int) -> bool:
    """Whether the weights directory ``name`` stays beside a checkpoint of ``version``: one of the last
    ``keep_versions`` versions. A version past the checkpoint's (written by a step a kill cut before its
    commit) goes: the restart trains that step again."""
    match = re.fullmatch(r"weights-v(\d+)", name)
    return match is not None and version - keep_versions < int(match.group(1)) <= version


def weights_of(directory: Path, version: int) -> Path | None:
    """The weights of ``version`` in the checkpoint dir ``directory``; None for version 0 (the run's
    start model, ``trainer.model_path``). LookupError if they are not there (pruned, or never written)."""
    if version == 0:
        return None
    path = directory / weights_name(version)
    if not (path / "config.json").is_file():
        kept = sorted(int(p.name[9:]) for p in directory.glob("weights-v*") if p.name[9:].isdigit())
        raise LookupError(
            f"{directory} has no weights of v{version} (it holds {', '.join(f'v{v}' for v in kept) or 'none'}): "
            "the trainer keeps the last trainer.keep_versions versions; raise it to recompute older steps"
        )
    return path
