"""The model runner: one transformers Qwen3-VL, a token-by-token decode loop, pause/continue, weight swaps.

Synchronous by design (torch); the HTTP layer calls it from a worker thread. Each forward step holds
``_step_lock``, so a weight swap lands between two steps, never inside one: a request in flight while
the weights change (the trainer paused it ``in_place``) gets per-token version spans, as SGLang reports
them.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from cua_stream.engine.forward import forward, prompt_position_ids, step_position_ids, teacher_forced_logprobs
from cua_stream.engine.params import SamplingParams
from cua_stream.engine.sampling import draw
from cua_stream.errors import EngineInputError, ImageDataError
from cua_stream.image_bytes import b64decode_strict, check_pixels, data_url_payload

__all__ = ["EngineInputError", "Gate", "Job", "ModelRunner", "PixelInputs", "decode_image_data"]


@dataclass(frozen=True)
class PixelInputs:
    """What the vision tower consumed for one request."""

    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None

    def digest(self) -> str:
        """sha256 of the float32 pixel rows (empty string without images): compared by replay tests."""
        if self.pixel_values is None:
            return ""
        return hashlib.sha256(self.pixel_values.float().contiguous().numpy().tobytes()).hexdigest()

    def grid(self) -> list[list[int]]:
        return [] if self.image_grid_thw is None else self.image_grid_thw.tolist()


@dataclass
class Generation:
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: dict[str, Any]
    version_spans: list[dict[str, Any]] = field(default_factory=list)
    """[{version, start, end}] over output-token offsets, in order."""
    input_logprobs: list[float | None] = field(default_factory=list)
    """With ``score_from``: the logprob of each input token from that position on (None for the first,
    as SGLang: no position before it is scored)."""
    version: str = ""
    """The weight version that scored the input (a scoring request)."""


class Gate:
    """Pause/continue shared by HTTP handlers and the scheduler thread.

    ``pause("abort")`` ends every request in flight or queued at its next step (finish_reason abort);
    ``in_place`` and ``retract`` freeze them between steps until ``resume``. As in SGLang, ``in_place``
    keeps their KV cache and ``retract`` drops it: a retracted request is prefilled again (prompt and
    the tokens it has so far) under the weights it resumes with. New requests wait while paused.
    """

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self._abort_epoch = 0
        self.retract_epoch = 0
        """Bumped by each retract-mode pause: a request that saw an older one recomputes its cache."""

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def epoch(self) -> int:
        return self._abort_epoch

    def pause(self, mode: str) -> None:
        if mode not in ("abort", "retract", "in_place"):
            raise EngineInputError(f"pause mode {mode!r}: expected abort, retract or in_place")
        self._running.clear()
        if mode == "abort":
            self._abort_epoch += 1
        elif mode == "retract":
            self.retract_epoch += 1

    def resume(self) -> None:
        self._running.set()

    def wait_running(self, timeout: float) -> bool:
        """Block up to ``timeout`` while paused; True once running."""
        return self._running.wait(timeout)

    def may_continue(self, epoch: int) -> bool:
        """Between steps: False if the request was aborted; otherwise block while paused, then True."""
        while not self._running.wait(timeout=0.05):
            if self._abort_epoch != epoch:
                return False
        return self._abort_epoch == epoch


def decode_image_data(item: str) -> bytes:
    """SGLang ``image_data`` entry: a data URL, a base64 string, or a local file path. Base64 follows the
    one rule the gateway applies too (``images.b64decode_strict``)."""
    if item.startswith("data:"):
        item = data_url_payload(item)
    elif len(item) < 4096 and os.path.isfile(item):
        with open(item, "rb") as f:
            return f.read()
    try:
        return b64decode_strict(item)
    except ImageDataError as e:
        raise EngineInputError(
            f"image_data: not a data URL, strict base64 string or file path ({e})"
        ) from None


def open_image(data: bytes) -> Any:
    """A fully decoded PIL image of ``data``, its size checked from the header first (EngineInputError
    for anything that is not a whole image within the pixel limit: truncated files, bombs, junk)."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        check_pixels(image.width, image.height)
        image.load()
    except ImageDataError as e:
        raise EngineInputError(f"image_data: {e}") from None
    except Exception as e:  # untrusted bytes: any decoder failure is the request's fault
        raise EngineInputError(f"image_data: cannot decode image ({type(e).__name__}: {e})") from None
    return image


@dataclass
class Job:
    """One /generate request as the scheduler advances it, a step at a time (all fields are the decode
    loop's own state; ``cancelled`` is the only one set from outside)."""

    rid: str
    input_ids: list[int]
    pixels: PixelInputs
    params: SamplingParams
    max_new_tokens: int
    """``params.max_new_tokens`` capped by the context length."""
    seed: int
    epoch: int
    gen: Generation
    generator: torch.Generator
    stop_ids: frozenset[int]
    cache: Any = None
    logits: torch.Tensor | None = None
    position: int = 0
    rope_delta: int = 0
    version: str = ""
    """The weight version of the weights that scored ``logits``."""
    retract_epoch: int = 0
    """The gate's retract epoch when ``cache`` was built (an older one: the cache was retracted)."""
    cancelled: str = ""
    """Why the request was cancelled (abort_request, client gone), or empty."""
    score_from: int | None = None
    """Score the input from this position (SGLang's ``logprob_start_len``; with ``max_new_tokens=0``)."""


class ModelRunner:
    def __init__(self, model_path: str, *, weight_version: str = "0", seed: int = 0) -> None:
        from transformers import AutoProcessor

        self.model_path = model_path
        self.weight_version = weight_version
        self.seed = seed
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.tokenizer = self.processor.tokenizer
        self.model = self._load(model_path)
        self.gate = Gate()
        self._step_lock = threading.Lock()
        self._requests = 0
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self.image_token_id = int(self.model.config.image_token_id)
        self.merge_size = int(self.processor.image_processor.merge_size)
        self.context_length = int(self.model.config.text_config.max_position_embeddings)
        """Prompt plus completion tokens one request may hold."""

    @staticmethod
    def _load(path: str) -> Any:
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()

    def load_weights(self, path: str, version: str | None) -> None:
        """Load new weights from ``path`` (same architecture) and swap them in between two steps."""
        model = self._load(path)
        with self._step_lock:
            self.model = model
            self.model_path = path
            if version is not None:
                self.weight_version = version

    def pixel_inputs(self, image_data: list[str]) -> PixelInputs:
        if not image_data:
            return PixelInputs(None, None)
        images = [open_image(decode_image_data(item)) for item in image_data]
        try:
            out = self.processor.image_processor(images=images, return_tensors="pt")
        except ValueError as e:  # e.g. an aspect ratio the processor refuses
            raise EngineInputError(f"image_data: {e}") from None
        return PixelInputs(out["pixel_values"], out["image_grid_thw"])

    def check_image_tokens(self, input_ids: list[int], pixels: PixelInputs) -> None:
        pads = sum(1 for t in input_ids if t == self.image_token_id)
        want = 0
        if pixels.image_grid_thw is not None:
            want = int(pixels.image_grid_thw.prod(-1).sum()) // self.merge_size**2
        if pads != want:
            raise EngineInputError(
                f"input_ids hold {pads} image pad tokens but the images need {want} (grids {pixels.grid()})"
            )

    def next_seed(self, params: SamplingParams) -> int:
        """The request's sampling seed: its own, else derived from the engine seed and a request counter,
        so a fixed sequence of requests replays exactly."""
        self._requests += 1
        if params.sampling_seed is not None:
            return params.sampling_seed
        return hash((self.seed, self._requests)) & 0x7FFF_FFFF_FFFF_FFFF

    def new_job(
        self,
        rid: str,
        input_ids: list[int],
        pixels: PixelInputs,
        params: SamplingParams,
        *,
        score_from: int | None = None,
    ) -> Job:
        """A request ready for ``advance``. Its completion is capped by the context length: a prompt
        that leaves no room is refused (EngineInputError), a longer ``max_new_tokens`` is shortened.
        A scoring request (``score_from``, nothing generated) needs no room beyond its input."""
        room = self.context_length - len(input_ids)
        if score_from is not None and params.max_new_tokens != 0:
            raise EngineInputError(
                "logprob_start_len: input logprobs are for scoring only (max_new_tokens=0)"
            )
        if score_from is not None and not 0 <= score_from < len(input_ids):
            raise EngineInputError(f"logprob_start_len: must lie in [0, {len(input_ids)})")
        if room < (0 if score_from is not None else 1):
            raise EngineInputError(
                f"input_ids: {len(input_ids)} tokens leave no room for a completion in the context "
                f"length of {self.context_length}"
            )
        seed = self.next_seed(params)
        return Job(
            rid=rid,
            input_ids=input_ids,
            pixels=pixels,
            params=params,
            max_new_tokens=min(params.max_new_tokens, room),
            seed=seed,
            epoch=self.gate.epoch,
            retract_epoch=self.gate.retract_epoch,
            gen=Generation([], [], {"type": "length", "length": min(params.max_new_tokens, room)}),
            generator=torch.Generator().manual_seed(seed),
            stop_ids=frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_ids),
            score_from=score_from,
        )

    def aborted(self, job: Job) -> bool:
        """Ends ``job`` as aborted (and says True) if it was cancelled or an abort-mode pause hit it."""
        if job.cancelled:
            job.gen.finish_reason = _aborted(job.cancelled)
            return True
        if self.gate.epoch != job.epoch:
            job.gen.finish_reason = _aborted("generation aborted by pause_generation(mode=abort)")
            return True
        return False

    @torch.inference_mode()
    def advance(self, job: Job) -> bool:
        """One scheduling step of ``job``: its prefill (the first time), one token drawn, and the forward
        pass that scores the next one. True when the job is finished."""
        gen, params = job.gen, job.params
        if job.score_from is not None:
            self._score(job)
            return True
        if job.max_new_tokens == 0:
            return True
        if job.retract_epoch != self.gate.retract_epoch:  # retracted: its cache is recomputed
            job.cache = job.logits = None
            job.retract_epoch = self.gate.retract_epoch
        if job.logits is None:  # prefill: the prompt, and the tokens so far of a retracted request
            ids = torch.tensor([job.input_ids + gen.output_ids], dtype=torch.long)
            with self._step_lock:
                model, version = self.model, self.weight_version
                positions, job.rope_delta = prompt_position_ids(model, ids, job.pixels.image_grid_thw)
                job.logits, job.cache = forward(
                    model,
                    ids,
                    positions,
                    pixel_values=job.pixels.pixel_values,
                    image_grid_thw=job.pixels.image_grid_thw,
                )
            job.position, job.version = ids.shape[1], version
        token, logprob = draw(job.logits[0, -1], params, job.generator)
        _append(gen, token, logprob, job.version)
        if token in job.stop_ids:
            gen.finish_reason = {"type": "stop", "matched": token}
            return True
        if params.stop and (matched := self._matched_stop(gen.output_ids, params)) is not None:
            gen.finish_reason = {"type": "stop", "matched": matched}
            return True
        if len(gen.output_ids) >= job.max_new_tokens:
            return True
        with self._step_lock:
            model, job.version = self.model, self.weight_version
            step = torch.tensor([[token]], dtype=torch.long)
            job.logits, job.cache = forward(
                model, step, step_position_ids(job.position, job.rope_delta), cache=job.cache
            )
        job.position += 1
        return False

    def _score(self, job: Job) -> None:
        """The logprob of every input token after ``score_from``, in one forward pass: a forced
        completion (a teacher's reply) scored by the policy, as the gateway records it. As SGLang's, the
        token at ``score_from`` itself gets none (None): it is scored from no position."""
        start = job.score_from
        assert start is not None
        with self._step_lock:
            model, job.gen.version = self.model, self.weight_version
            scored = teacher_forced_logprobs(
                model,
                job.input_ids[: start + 1],
                job.input_ids[start + 1 :],
                temperature=job.params.temperature,
                pixel_values=job.pixels.pixel_values,
                image_grid_thw=job.pixels.image_grid_thw,
            )
            job.gen.input_logprobs = [None, *scored]

    def generate(
        self, input_ids: list[int], pixels: PixelInputs, params: SamplingParams, *, rid: str = "direct"
    ) -> Generation:
        """Run one request to the end on the calling thread (tests and scripts; the server schedules)."""
        job = self.new_job(rid, input_ids, pixels, params)
        while not self.aborted(job) and not self.advance(job):
            pass
        return job.gen

    def _matched_stop(self, output_ids: list[int], params: SamplingParams) -> str | None:
        text = self.tokenizer.decode(output_ids, skip_special_tokens=params.skip_special_tokens)
        return next((s for s in params.stop if s in text), None)

    def text_of(self, gen: Generation, params: SamplingParams) -> str:
        """The reply text as SGLang returns it: the matched stop token or string trimmed unless no_stop_trim."""
        ids = gen.output_ids
        matched = gen.finish_reason.get("matched")
        if isinstance(matched, int) and not params.no_stop_trim and ids:
            ids = ids[:-1]
        text = self.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens)
        if isinstance(matched, str) and not params.no_stop_trim:
            text = text[: text.find(matched)]
        return text


def _append(gen: Generation, token: int, logprob: float, version: str) -> None:
    index = len(gen.output_ids)
    gen.output_ids.append(token)
    gen.logprobs.append(logprob)
    spans = gen.version_spans
    if spans and spans[-1]["version"] == version:
        spans[-1]["end"] = index + 1
    else:
        spans.append({"version": version, "start": index, "end": index + 1})


def _aborted(message: str) -> dict[str, Any]:
    return {
        "type": "abort",
        "message": message,
        "status_code": 503,
        "err_type": "ServiceUnavailable",
    }
