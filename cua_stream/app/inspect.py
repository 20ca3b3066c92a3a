"""``cua-stream inspect``'s reading beyond one library call: an episode's view gathered from the topics,
and the tokenizer that turns token ids into text."""

from __future__ import annotations

from pathlib import Path

from consumers.trainer.inspect.episode import EpisodeView, episode_view
from consumers.trainer.inspect.read import episode_records, steps_of
from consumers.trainer.inspect.render import Text
from cua_stream.config import BusConfig
from cua_stream.events import CallRecord, ScoreEvent


async def read_episode(bus: BusConfig, run: str, episode_id: str, *, max_seq_len: int) -> EpisodeView:
    """The episode's calls and scores, with the run's steps and drops that say what became of them."""
    records = await episode_records(bus, lambda e: e.run_id == run and e.episode_id == episode_id)
    steps, drops = await steps_of(bus, run)
    events = [d.event for d in records if isinstance(d.event, (CallRecord, ScoreEvent))]
    view = episode_view(run, episode_id, events, steps, drops, max_seq_len=max_seq_len)
    if view is None:
        raise LookupError(f"run {run!r} has no call or score of episode {episode_id!r} on the topics")
    return view


def local_model(model_path: str | None) -> Path | None:
    """``model_path`` when it is a model directory on this machine (a config written for another one may
    name a path that is not here)."""
    if not model_path or not (Path(model_path) / "config.json").is_file():
        return None
    return Path(model_path)


def decoder(model: Path) -> Text:
    """Token ids → text with ``model``'s tokenizer (special tokens shown)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)
