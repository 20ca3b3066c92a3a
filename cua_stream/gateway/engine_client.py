"""Talking to an engine's native ``/generate`` (SGLang 0.5.x protocol; the reference engine speaks it too).

``parse_generate_response`` is pure and strict: a reply whose ids, logprobs or version spans do not line
up is a protocol error (502), because recording it would train on data the engine did not produce.
Weight versions are integers in cua-stream events; SGLang's start-up label ``"default"`` (before the
trainer's first update) reads as version 0.
"""

from __future__ import annotations

import array
import logging
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx
import msgspec

from cua_stream.auth import bearer_headers
from cua_stream.errors import EngineHTTPError, EngineProtocolError, EngineUnavailable
from cua_stream.events import VersionSpan

__all__ = ["EngineHTTPError", "EngineProtocolError", "EngineUnavailable"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineReply:
    text: str
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """stop | length | abort"""
    abort_status: int | None
    abort_message: str
    weight_versions: tuple[VersionSpan, ...]
    prompt_tokens: int
    engine_ms: float
    meta_info: dict[str, Any]


def _version(label: Any) -> int:
    if label == "default":
        return 0
    try:
        return int(label)
    except (TypeError, ValueError):
        raise EngineProtocolError(f"weight_version {label!r} is not an integer version") from None


def _meta(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("meta_info"), dict):
        raise EngineProtocolError("reply has no meta_info object")
    return payload["meta_info"]


def parse_generate_response(payload: Any, *, engine_ms: float = 0.0) -> EngineReply:
    meta = _meta(payload)
    output_ids = payload.get("output_ids")
    if not isinstance(output_ids, list) or not all(isinstance(t, int) for t in output_ids):
        raise EngineProtocolError("reply has no output_ids list")
    logprobs = _logprobs(meta.get("output_token_logprobs"), "output_token_logprobs", output_ids, "output")
    finish = meta.get("finish_reason")
    finish_type = finish.get("type") if isinstance(finish, dict) else finish
    if finish_type not in ("stop", "length", "abort"):
        raise EngineProtocolError(f"finish_reason {finish!r} is not stop, length or abort")
    abort_status = abort_message = None
    if finish_type == "abort" and isinstance(finish, dict):
        abort_status = finish.get("status_code")
        abort_message = finish.get("message")
    return EngineReply(
        text=str(payload.get("text") or ""),
        output_ids=output_ids,
        logprobs=logprobs,
        finish_reason=finish_type,
        abort_status=abort_status if isinstance(abort_status, int) else None,
        abort_message=str(abort_message or "generation aborted by the engine"),
        weight_versions=_spans(meta, len(output_ids)),
        prompt_tokens=int(meta.get("prompt_tokens") or 0),
        engine_ms=engine_ms,
        meta_info=meta,
    )


def parse_scored_response(
    payload: Any, forced_ids: Sequence[int], text: str, *, engine_ms: float = 0.0
) -> EngineReply:
    """A scoring reply (``max_new_tokens=0``, input logprobs from the prompt's last token) as the reply
    the policy would have given: ``forced_ids`` with the policy's logprob of each, ended by ``stop``.
    SGLang's input logprobs from ``logprob_start_len`` k name tokens k.. and leave token k's null (it has
    no position before k to score it from), so a request from the prompt's last token answers that token
    first, then the forced ids. Strict like ``parse_generate_response``: each entry must name its id."""
    meta = _meta(payload)
    entries = meta.get("input_token_logprobs")
    if not isinstance(entries, list) or len(entries) != len(forced_ids) + 1:
        raise EngineProtocolError(
            f"input_token_logprobs has {len(entries) if isinstance(entries, list) else 'no'} entries for "
            f"the prompt's last token and {len(forced_ids)} forced ids"
        )
    logprobs = _logprobs(entries[1:], "input_token_logprobs", forced_ids, "forced", first=1)
    n = len(forced_ids)
    return EngineReply(
        text=text,
        output_ids=list(forced_ids),
        logprobs=logprobs,
        finish_reason="stop",
        abort_status=None,
        abort_message="",
        weight_versions=(
            VersionSpan(version=_version(meta.get("weight_version", "default")), start=0, end=n),
        ),
        prompt_tokens=int(meta.get("prompt_tokens") or 0) - n,
        engine_ms=engine_ms,
        meta_info=meta,
    )


def _logprobs(pairs: Any, key: str, ids: Sequence[int], what: str, *, first: int = 0) -> list[float]:
    """The logprobs of ``pairs`` (``meta[key]`` from index ``first``): one ``[logprob, id, ...]`` entry
    per id, each naming its id."""
    if not isinstance(pairs, list) or len(pairs) != len(ids):
        raise EngineProtocolError(
            f"{key} has {len(pairs) if isinstance(pairs, list) else 'no'} entries for {len(ids)} {what} ids"
        )
    logprobs: list[float] = []
    for i, (pair, tok) in enumerate(zip(pairs, ids, strict=True), first):
        if not isinstance(pair, (list, tuple)) or len(pair) < 2 or pair[1] != tok:
            raise EngineProtocolError(f"{key}[{i}] does not name {what} id {tok}")
        if not isinstance(pair[0], (int, float)) or math.isnan(pair[0]):
            raise EngineProtocolError(f"{key}[{i}] has no logprob")
        logprobs.append(float(pair[0]))
    return logprobs


def _spans(meta: dict[str, Any], n: int) -> tuple[VersionSpan, ...]:
    raw = meta.get("weight_versions")
    if not raw:
        return (VersionSpan(version=_version(meta.get("weight_version", "default")), start=0, end=n),)
    spans: list[VersionSpan] = []
    expected_start = 0
    for item in raw:
        if not isinstance(item, dict):
            raise EngineProtocolError(f"weight_versions entry {item!r} is not an object")
        start, end = item.get("start"), item.get("end")
        if not isinstance(start, int) or not isinstance(end, int) or start != expected_start or end <= start:
            raise EngineProtocolError(f"weight_versions do not tile the output: {raw!r}")
        spans.append(VersionSpan(version=_version(item.get("version")), start=start, end=end))
        expected_start = end
    if expected_start != n:
        raise EngineProtocolError(f"weight_versions cover {expected_start} of {n} output tokens")
    return tuple(spans)


class JsonStrings(tuple[bytes, ...]):
    """Strings already encoded as JSON string literals (quotes included). Image data given this way is
    spliced into the /generate body verbatim: every request carries every screenshot of the history,
    and re-encoding them all on each turn would cost more than the rest of the turn."""

    @classmethod
    def of(cls, strings: Iterable[str]) -> JsonStrings:
        return cls(_json.encode(s) for s in strings)

    def decode(self) -> list[str]:
        return [msgspec.json.decode(s) for s in self]


@dataclass(frozen=True, slots=True)
class JsonIds:
    """Token ids already encoded as JSON: ``fragments`` are comma-separated runs of ids (one per call of
    a lineage, never empty), spliced into the /generate body verbatim. A turn's prompt is its parent's
    ids plus a few hundred new ones; converting and encoding all of them on each turn would cost more
    than encoding the new ones (``array.tolist`` alone is ~0.1 ms for 5,000 ids)."""

    fragments: tuple[bytes, ...]
    count: int

    @classmethod
    def of(cls, ids: Sequence[int], before: JsonIds | None = None) -> JsonIds:
        """``before``'s ids followed by ``ids``."""
        if before is None:
            before = cls((), 0)
        if not ids:
            return before
        values = ids.tolist() if isinstance(ids, array.array) else list(ids)
        fragment = _json.encode(values)[1:-1]  # no brackets
        return cls((*before.fragments, fragment), before.count + len(ids))

    def __len__(self) -> int:
        return self.count

    def literal(self) -> bytes:
        """The JSON array."""
        return b"[" + b",".join(self.fragments) + b"]"

    def decode(self) -> list[int]:
        return msgspec.json.decode(self.literal(), type=list[int])


_json = msgspec.json.Encoder()


def generate_body(
    input_ids: list[int] | JsonIds,
    image_data: Sequence[str] | JsonStrings,
    sampling_params: dict[str, Any],
    *,
    routing_key: str | None = None,
    rid: str | None = None,
    score_from: int | None = None,
) -> bytes:
    """The JSON body of a native /generate request (output-token logprobs always on). Ids and images
    given as JSON are spliced in verbatim: the bytes are the same as for the decoded values. With
    ``score_from`` the input's logprobs from that position are asked for (a forced completion scored)."""
    body: dict[str, Any] = {
        "input_ids": [] if isinstance(input_ids, JsonIds) else input_ids,
        "sampling_params": sampling_params,
        "return_logprob": True,
        "logprob_start_len": -1 if score_from is None else score_from,
    }
    if routing_key:
        body["routing_key"] = routing_key  # sticky routing keeps an episode on one prefix cache
    if rid:
        body["rid"] = rid  # the call id: engine logs and records name the same request
    if image_data and not isinstance(image_data, JsonStrings):
        body["image_data"] = list(image_data)
    encoded = _json.encode(body)
    if isinstance(input_ids, JsonIds):  # one copy of the ids, not a list of Python ints
        assert encoded.startswith(_NO_IDS)
        parts = [_NO_IDS[:-2]]  # {"input_ids":[
        _append_joined(parts, input_ids.fragments)
        parts.append(encoded[len(_NO_IDS) - 2 :])  # ],"sampling_params":...
    else:
        parts = [encoded]
    if image_data and isinstance(image_data, JsonStrings):  # one copy of the screenshots, not two
        parts[-1] = parts[-1][:-1]
        parts.append(b',"image_data":[')
        _append_joined(parts, image_data)
        parts.append(b"]}")
    return b"".join(parts)


_NO_IDS = b'{"input_ids":[],'


def _append_joined(parts: list[bytes], items: Iterable[bytes]) -> None:
    """Append ``items`` comma-separated (the final join then copies each once)."""
    for i, item in enumerate(items):
        if i:
            parts.append(b",")
        parts.append(item)


class Engine(Protocol):
    """What the gateway needs from an engine (EngineClient; unit tests use an in-memory stand-in)."""

    async def health(self) -> tuple[bool, str]: ...

    async def generate(
        self,
        input_ids: list[int] | JsonIds,
        image_data: Sequence[str] | JsonStrings,
        sampling_params: dict[str, Any],
        *,
        routing_key: str | None = None,
        rid: str | None = None,
    ) -> EngineReply: ...

    async def score(
        self,
        input_ids: JsonIds,
        image_data: Sequence[str] | JsonStrings,
        forced: Sequence[int],
        text: str,
        temperature: float,
        *,
        routing_key: str | None = None,
        rid: str | None = None,
    ) -> EngineReply: ...


def engine_error_message(error: EngineHTTPError) -> str:
    """The engine's own error text (SGLang and the reference engine answer JSON), for an OpenAI-shaped
    error body: the client never sees a plain-text body passed through."""
    try:
        body = msgspec.json.decode(error.body)
    except (msgspec.DecodeError, RecursionError):
        text = error.body[:500].decode(errors="replace").strip()
    else:
        inner = body.get("error") if isinstance(body, dict) else None
        found = inner.get("message") if isinstance(inner, dict) else None
        if found is None and isinstance(body, dict):
            found = body.get("message") or body.get("detail")
        text = str(found if found is not None else body)[:500]
    return f"engine answered {error.status}: {text or 'no details'}"


_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""Failures of a reused keep-alive connection that the server had already closed: the request never
reached a handler (or its handler is aborted), so it is sent once more on a fresh connection."""


class EngineClient:
    """An httpx client for one engine (or a router in front of several).

    Each /generate has a deadline (``timeout_s``); when it passes, or when the caller is cancelled (the
    session's client went away), the engine is told to stop with SGLang's ``/abort_request`` for the
    request's ``rid``, so no generation outlives the call that asked for it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
        api_key: object | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        # httpx's own read timeout is a backstop only: the deadline below fires first and aborts.
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s + 30.0, connect=10.0),
            transport=transport,
            headers=bearer_headers(api_key),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> tuple[bool, str]:
        """(healthy, detail) from the engine's /health."""
        try:
            response = await self._http.get("/health", timeout=5.0)
        except httpx.TransportError as e:
            return False, f"unreachable: {type(e).__name__}"
        if response.status_code != 200:
            return False, f"/health answered {response.status_code}"
        return True, "ok"

    async def abort(self, rid: str) -> None:
        """Ask the engine to stop request ``rid`` (best effort, a few seconds at most; never raises)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            try:
                await self._http.post("/abort_request", json={"rid": rid})
            except httpx.HTTPError as e:
                log.warning("abort_request for %s failed: %s", rid, e)

    async def generate(
        self,
        input_ids: list[int] | JsonIds,
        image_data: Sequence[str] | JsonStrings,
        sampling_params: dict[str, Any],
        *,
        routing_key: str | None = None,
        rid: str | None = None,
    ) -> EngineReply:
        payload, engine_ms = await self._post_generate(
            input_ids, image_data, sampling_params, routing_key=routing_key, rid=rid
        )
        return parse_generate_response(payload, engine_ms=engine_ms)

    async def score(
        self,
        input_ids: JsonIds,
        image_data: Sequence[str] | JsonStrings,
        forced: Sequence[int],
        text: str,
        temperature: float,
        *,
        routing_key: str | None = None,
        rid: str | None = None,
    ) -> EngineReply:
        """A forced completion (``forced`` after the prompt ``input_ids``) scored by the policy, as
        the reply it would be: SGLang's ``max_new_tokens=0`` with input logprobs from the prompt's last
        token (SGLang gives the first token scored no logprob: see ``parse_scored_response``)."""
        payload, engine_ms = await self._post_generate(
            JsonIds.of(forced, input_ids),
            image_data,
            {"temperature": temperature, "max_new_tokens": 0},
            routing_key=routing_key,
            rid=rid,
            score_from=len(input_ids) - 1,
        )
        return parse_scored_response(payload, forced, text, engine_ms=engine_ms)

    async def _post_generate(
        self,
        input_ids: list[int] | JsonIds,
        image_data: Sequence[str] | JsonStrings,
        sampling_params: dict[str, Any],
        *,
        routing_key: str | None,
        rid: str | None,
        score_from: int | None = None,
    ) -> tuple[Any, float]:
        rids = [rid or uuid.uuid4().hex]

        async def post() -> httpx.Response:
            content = generate_body(
                input_ids,
                image_data,
                sampling_params,
                routing_key=routing_key,
                rid=rids[-1],
                score_from=score_from,
            )
            return await self._http.post(
                "/generate", content=content, headers={"content-type": "application/json"}
            )

        started = time.perf_counter()
        try:
            with anyio.fail_after(self.timeout_s):
                try:
                    response = await post()
                except _STALE_CONNECTION as e:
                    log.info("engine connection failed (%s); retrying %s on a fresh one", e, rids[-1])
                    await self.abort(rids[-1])  # in case the engine did start it
                    rids.append(f"{rids[0]}.retry")  # a new rid: the first may still be winding down
                    response = await post()
        except TimeoutError:
            await self.abort(rids[-1])
            raise EngineUnavailable(
                f"the engine did not answer within {self.timeout_s:g} s (gateway.engine_timeout_s); "
                "its generation was aborted"
            ) from None
        except anyio.get_cancelled_exc_class():
            await self.abort(rids[-1])
            raise
        except httpx.TransportError as e:
            raise EngineUnavailable(f"engine unreachable: {type(e).__name__}: {e}") from None
        engine_ms = (time.perf_counter() - started) * 1e3
        if response.status_code // 100 != 2:
            raise EngineHTTPError(
                response.status_code,
                response.content,
                response.headers.get("content-type", "application/json"),
            )
        try:
            return msgspec.json.decode(response.content), engine_ms
        except (msgspec.DecodeError, RecursionError):
            raise EngineProtocolError("engine reply is not JSON") from None
