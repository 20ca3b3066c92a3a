"""`cua-stream make-tiny-model DIR`: build the tiny offline Qwen3-VL (model, processor, chat template)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cua_stream.cli.common import friendly_errors


@friendly_errors
def make_tiny_model(
    out_dir: Annotated[Path, typer.Argument(help="Directory to save the model into.")],
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
    max_pixels: Annotated[
        int, typer.Option(help="Screenshot pixel cap (640x360 = 220 image tokens for 1280x720).")
    ] = 640 * 360,
    size: Annotated[
        str, typer.Option(help="tiny (2 layers of width 64) or small (4 of width 256).")
    ] = "tiny",
) -> None:
    """Random weights, the real Qwen vocabulary and special-token ids, no network.

    Example: cua-stream make-tiny-model models/tiny"""
    from transformers.utils import logging as hf_logging

    from cua_stream.models.tiny import make_tiny_model as build

    hf_logging.disable_progress_bar()
    from cua_stream.models.tiny import SIZES

    if size not in SIZES:
        raise typer.BadParameter(f"one of {', '.join(SIZES)}", param_hint="--size")
    path = build(out_dir, seed=seed, max_pixels=max_pixels, size=size)
    typer.echo(f"tiny Qwen3-VL saved to {path}")
