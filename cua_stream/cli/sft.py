"""`cua-stream sft`: fine-tune the policy on recorded demonstrations (``record-oracle``'s runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, make_bus
from cua_stream.cli.defaults import field_option

out = Console(highlight=False)


@friendly_errors
def sft(
    run_id: Annotated[list[str], typer.Option(help="A demonstration run to train on (repeatable).")],
    model_path: Annotated[Path, typer.Option(help="The starting weights and the processor.")],
    out_dir: Annotated[
        Path | None, field_option("sft", "out_dir", "--out", help="Where the fine-tuned model goes.")
    ] = None,
    epochs: Annotated[
        int | None, field_option("sft", "epochs", help="Passes over the demonstrations.")
    ] = None,
    target_nll: Annotated[
        float | None,
        field_option(
            "sft", "target_nll", help="Stop once the demonstrations' mean token NLL is at most this."
        ),
    ] = None,
    batch_size: Annotated[
        int | None, field_option("sft", "batch_size", help="Samples per optimizer step.")
    ] = None,
    lr: Annotated[float | None, field_option("sft", "lr", help="Learning rate.")] = None,
    blob_dir: Annotated[
        str | None, field_option("sft", "blob_dir", help="The gateway's screenshot blob store.")
    ] = None,
    drawn: Annotated[
        int | None,
        field_option(
            "sft", "drawn", help="First screens to draw from the demonstrations' on new layouts (click-box)."
        ),
    ] = None,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Cross-entropy on the completion tokens of the runs' rewarded episodes (the loss masks and images
    of GRPO's own sample assembly); saves a model directory the engine starts from or loads.

    Example: cua-stream sft --run-id demos-1 --model-path models/tiny --out models/tiny-sft"""
    import msgspec
    from transformers.utils import logging as transformers_logging

    from consumers.trainer.sft.demonstrations import SftConfig
    from consumers.trainer.sft_run import read_demonstrations, train
    from cua_stream.config import build

    file_data = load_file(config)
    cfg = build(
        SftConfig,
        file_data=file_data,
        overrides={
            "run_ids": run_id,
            "model_path": str(model_path),
            "out_dir": str(out_dir) if out_dir else None,
            "epochs": epochs,
            "target_nll": target_nll,
            "batch_size": batch_size,
            "lr": lr,
            "blob_dir": blob_dir,
            "drawn": drawn,
        },
    )
    cfg = msgspec.structs.replace(cfg, bus=make_bus(bootstrap, prefix, config))
    transformers_logging.disable_progress_bar()  # the epochs' lines are the progress to watch
    demos = anyio.run(read_demonstrations, cfg)
    skipped = ", ".join(f"{why} x{n}" for why, n in sorted(demos.rejected.items())) or "none"
    out.print(
        f"demonstrations: {demos.episodes} episode(s), {len(demos.samples)} sample(s)"
        + (f" ({demos.drawn} of them drawn)" if demos.drawn else "")
        + f"; left out: {skipped}"
    )
    if not demos.samples:
        out.print(f"[red]no demonstration of runs {', '.join(cfg.run_ids)} to train on[/red]")
        raise typer.Exit(2)
    result = train(
        cfg,
        demos,
        on_epoch=lambda e: out.print(f"    {e.said(cfg.epochs)}"),
    )
    if result.reached_target:
        out.print(f"stopped at epoch {len(result.epochs)}: the NLL reached the target {cfg.target_nll:g}")
    elif cfg.target_nll is not None:
        out.print(
            f"[yellow]the NLL did not reach the target {cfg.target_nll:g} in {cfg.epochs} epochs[/yellow]"
        )
    out.print(
        f"mean NLL of a demonstration token: {result.nll_before:.3f} -> {result.nll_after:.3f}; "
        f"model saved to {result.out}"
    )
    out.print(f"Serve it: [bold]cua-stream engine {result.out}[/bold]")
