"""`cua-stream inspect`: a trained step, or an episode's call tree, rebuilt from the topics alone.

``step`` reads the step's ``TrainStep`` record and its groups' turns, summaries and scores, rebuilds the
batch with the trainer's own functions (``consumers.trainer.inspect.step``) and checks it against the record;
``episode`` shows one episode's calls, compactions, samples, score and the step that trained it
(``consumers.trainer.inspect.episode``). Both only read (group-less, committed records).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from consumers.trainer.inspect.read import read_step
from consumers.trainer.inspect.render import (
    Text,
    episode_document,
    episode_text,
    recompute_document,
    recompute_text,
    step_document,
    step_text,
)
from consumers.trainer.inspect.step import StepRules
from cua_stream.app.inspect import decoder, local_model, read_episode
from cua_stream.app.recompute import RecomputeRules
from cua_stream.app.recompute import recompute as recompute_step
from cua_stream.cli.common import Bootstrap, ConfigFile, Prefix, friendly_errors, load_file, make_bus
from cua_stream.cli.defaults import field_option
from cua_stream.config import build, require_model_dir

app = typer.Typer(
    help="Rebuild what the trainer saw from the topics: a step's batch, an episode's call tree.\n\n"
    "Example: cua-stream inspect step --run r1 --step 7",
    no_args_is_help=True,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)

Run = Annotated[str, typer.Option("--run", "-r", help="The run id (the trainer's run_id).")]
Json = Annotated[bool, typer.Option("--json", help="One JSON document instead of text.")]
Model = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="Model directory whose tokenizer decodes the tokens (default: the config's trainer.model_path "
        "if it is one here; else token ids are shown).",
    ),
]
MaxSeqLen = Annotated[
    int | None,
    field_option(
        "trainer",
        "max_seq_len",
        "--max-seq-len",
        min=1,
        help="The trainer's max_seq_len (unset: --config's).",
    ),
]
NegativeScale = Annotated[
    float | None,
    field_option(
        "trainer",
        "negative_scale",
        "--negative-scale",
        help="The trainer's negative_scale (unset: --config's).",
    ),
]
Full = Annotated[bool, typer.Option("--full", help="Show every token and the whole text of each part.")]
Recompute = Annotated[
    Path | None,
    typer.Option(
        "--recompute",
        help="The trainer's checkpoint directory: load the weights the step started from (v N-1; v0 is the "
        "start model), recompute its loss, logprob gap, KL and grad norm with the trainer's backend and "
        "show them beside the record, with the tokens where trainer and engine disagree most. Needs "
        "trainer.keep_versions >= 2 for any step but the first.",
    ),
]
BlobDir = Annotated[
    str | None,
    typer.Option(
        "--blob-dir", help="With --recompute: the blob store of the screenshots (default: trainer.blob_dir)."
    ),
]
TopK = Annotated[
    int, typer.Option("--top-k", help="With --recompute: how many tokens of widest gap to show.")
]


@app.command()
@friendly_errors
def step(
    run: Run,
    number: Annotated[int, typer.Option("--step", "-s", help="The step number (as in its TrainStep).")],
    as_json: Json = False,
    model: Model = None,
    max_seq_len: MaxSeqLen = None,
    negative_scale: NegativeScale = None,
    full: Full = False,
    recompute: Recompute = None,
    top_k: TopK = 10,
    blob_dir: BlobDir = None,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """Rebuild the batch step N of a run trained, and check it against the step's record (exit 1 if they
    differ). The group rules and max_seq_len are the trainer's: the config's trainer section, or the
    options. With --recompute, measure it again from the weights it started from (exit 1 if the numbers
    differ from the record).

    Example: cua-stream inspect step --run r1 --step 7 --full"""
    bus = make_bus(bootstrap, prefix, config)
    rules = _rules(config, max_seq_len, negative_scale)
    batch = anyio.run(read_step, bus, run, number, rules)
    text = _text(model, config)
    again = None
    if recompute is not None and batch.mismatches:  # a batch that is not the step's cannot replay it
        err.print("--recompute: not run, the rebuilt batch is not the step's (see the mismatches)")
    elif recompute is not None:
        overrides = {"model_path": str(model) if model else None, "blob_dir": blob_dir}
        settings = build(RecomputeRules, "trainer", file_data=load_file(config), overrides=overrides)
        again = recompute_step(batch, recompute, settings, top_k=top_k)
    if as_json:
        document = step_document(batch, rules, text)
        print(
            json.dumps(
                document | ({"recomputed": recompute_document(again, text)} if again else {}), indent=1
            )
        )
    else:
        for line in step_text(batch, rules, text, full=full):
            out.print(line, markup=False)
        for line in recompute_text(again, text) if again else ():
            out.print(line, markup=False)
    if batch.mismatches:
        err.print(f"[bold red]MISMATCH[/bold red]: the rebuilt batch is not what step {number} trained")
        raise typer.Exit(1)
    if again is not None and not again.agrees:
        err.print(f"[bold red]MISMATCH[/bold red]: step {number} recomputed differs from its record")
        raise typer.Exit(1)


@app.command()
@friendly_errors
def episode(
    episode_id: Annotated[str, typer.Argument(help="The episode id.")],
    run: Run,
    as_json: Json = False,
    model: Model = None,
    max_seq_len: MaxSeqLen = None,
    full: Full = False,
    bootstrap: Bootstrap = None,
    prefix: Prefix = None,
    config: ConfigFile = None,
) -> None:
    """An episode's call tree: each call with its parent or the call it retried, its compactions, the
    sample that trains each completion, its score or discard reason, and the step that trained it.

    Example: cua-stream inspect episode EPISODE_ID --run r1"""
    bus = make_bus(bootstrap, prefix, config)
    rules = _rules(config, max_seq_len, None)
    view = anyio.run(functools.partial(read_episode, bus, run, episode_id, max_seq_len=rules.max_seq_len))
    text = _text(model, config)
    if as_json:
        print(json.dumps(episode_document(view, text), indent=1))
    else:
        for line in episode_text(view, text, full=full):
            out.print(line, markup=False)


def _rules(config: Path | None, max_seq_len: int | None, negative_scale: float | None) -> StepRules:
    overrides = {"max_seq_len": max_seq_len, "negative_scale": negative_scale}
    return build(StepRules, "trainer", file_data=load_file(config), overrides=overrides)


def _text(model: Path | None, config: Path | None) -> Text:
    """Token ids → text with the model's tokenizer: ``--model``'s (it must be a model directory), else
    the config's ``trainer.model_path`` when it is one on this machine; None: ids are shown instead."""
    if model is not None:
        require_model_dir("--model", str(model))
    elif (model := local_model((load_file(config).get("trainer") or {}).get("model_path"))) is None:
        return None
    return decoder(model)
