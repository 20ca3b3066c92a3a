"""An OpenAI chat-completions body → what the gateway needs: messages, call kind, engine sampling params.

Refused (400): client-supplied ``input_ids`` and other fields that would let the client steer the
tokens the gateway owns; ``n > 1``; tools; a temperature different from the session's training
temperature (checked by the session). Ignored: fields that do not change sampling (``model``,
``prompt_cache_key``, ``user``, ``logprobs``: the gateway always takes logprobs from the engine, ...).

A request without ``cua_call_kind`` is recorded as an agent turn and counted (per session and in the
gateway metrics): computer-1 through our binding always sets it, so a missing marker means a client
outside the binding, and an agent turn is the only kind that needs no marker to be trained correctly.

A body is read once per request (``read_body``): its fields and where its messages are, in one value
that every consumer takes (the parse, the session's ``KnownRequest``, a teacher, which is sent the
messages' own bytes); none of them reads the bytes again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec

from cua_stream.engine.params import SamplingParams
from cua_stream.errors import SamplingError
from cua_stream.events import CALL_KIND_FIELD, CallKind
from cua_stream.gateway import request_prefix
from cua_stream.gateway.messages import Message, WireMessage, canonical_messages
from cua_stream.gateway.refusal import bad_request
from cua_stream.gateway.request_prefix import KnownRequest, Layout
from cua_stream.gateway.session import Session

# Fields that smuggle token-level control past the gateway (Miles' request contract refuses the same).
FORBIDDEN_FIELDS = ("input_ids", "prompt_token_ids", "logprob_start_len", "routed_experts_start_len")
UNSUPPORTED_FIELDS = ("tools", "tool_choice", "functions", "function_call", "logit_bias")
_OPENAI_TO_SGLANG = {
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "seed": "sampling_seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
}


@dataclass(frozen=True)
class ChatCall:
    messages: tuple[Message, ...]
    kind: CallKind
    kind_given: bool
    sampling: dict[str, Any]
    """SGLang ``sampling_params`` for the engine (training defaults filled in)."""
    stream: bool
    model: str
    known: KnownRequest | None = None
    """This request's messages with their bytes, to read the session's next request faster (None when
    the body was not raw JSON or its messages could not be located)."""
    sent_messages: Any = None
    """A teacher session's messages as the client sent them, for its teacher: their JSON text
    (``msgspec.Raw``, cut from the body, not decoded) where they were located, else decoded values."""


class ChatBody(msgspec.Struct):
    """The fields of a chat-completions body the gateway reads (others are ignored). Loosely typed where
    the checks below give a clearer refusal than a type error would."""

    messages: list[WireMessage] | None = None
    model: Any = None
    temperature: Any = None
    top_p: Any = None
    top_k: Any = None
    min_p: Any = None
    stop: Any = None
    stop_token_ids: Any = None
    seed: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    repetition_penalty: Any = None
    max_tokens: Any = None
    max_completion_tokens: Any = None
    n: Any = None
    stream: Any = None
    response_format: Any = None
    cua_call_kind: Any = None
    input_ids: Any = None
    prompt_token_ids: Any = None
    logprob_start_len: Any = None
    routed_experts_start_len: Any = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    logit_bias: Any = None


assert CALL_KIND_FIELD == "cua_call_kind"  # the field name above
_decoder = msgspec.json.Decoder(ChatBody)
_plain_decoder = msgspec.json.Decoder()
"""For a teacher session's messages that could not be located (a body with two ``messages`` keys)."""


@dataclass(frozen=True, slots=True)
class RequestBody:
    """A chat request's body as read once (``read_body``)."""

    fields: ChatBody
    layout: Layout | None
    """Where its messages are (None: not raw JSON, or not located)."""


def decode_body(raw: bytes | dict[str, Any]) -> ChatBody:
    """Decode a request body (raw JSON, or already decoded in tests and tools); 400 if malformed."""
    with _refused_as_bad_request():
        return _decoder.decode(raw if isinstance(raw, bytes) else msgspec.json.encode(raw))


@contextmanager
def _refused_as_bad_request() -> Iterator[None]:
    try:
        yield
    except msgspec.ValidationError as e:
        raise bad_request(f"request body: {e}") from None
    except msgspec.DecodeError as e:
        raise bad_request(f"request body is not valid JSON: {e}") from None
    except RecursionError:
        raise bad_request("request body is nested too deeply") from None


def parse_chat_request(raw: bytes | dict[str, Any], session: Session) -> ChatCall:
    read = read_body(raw, session.known_request)
    body, layout = read.fields, read.layout
    for name in FORBIDDEN_FIELDS:
        if getattr(body, name) is not None:
            raise bad_request(f"{name}: the session gateway owns the token ids; clients may not supply them")
    for name in UNSUPPORTED_FIELDS:
        if getattr(body, name):
            raise bad_request(f"{name}: not supported by the session gateway")
    if body.n not in (1, None):
        raise bad_request(f"n={body.n}: the session gateway records one completion per call")
    if body.response_format not in (None, {"type": "text"}):
        raise bad_request("response_format: constrained decoding is not supported by the session gateway")
    session.check_temperature(body.temperature)
    kind, kind_given = _call_kind(body.cua_call_kind)
    if layout is None:
        messages, known = canonical_messages(body.messages), None
    else:
        new = canonical_messages(body.messages, first_index=len(layout.prefix))
        messages = layout.prefix + new
        assert isinstance(raw, bytes)
        known = layout.remember(raw, new)
    return ChatCall(
        messages=messages,
        kind=kind,
        kind_given=kind_given,
        sampling=_sampling(body, session),
        stream=bool(body.stream),
        model=str(body.model or ""),
        known=known,
        sent_messages=_as_sent(raw, read) if session.teacher is not None else None,
    )


def _as_sent(raw: bytes | dict[str, Any], read: RequestBody) -> Any:
    """The messages as the client sent them: their bytes where the read located them (no decode)."""
    if not isinstance(raw, bytes):
        return raw.get("messages")
    if read.fields.messages is None:
        return None
    if read.layout is None:
        return _plain_decoder.decode(raw).get("messages")
    layout = read.layout
    start = end = len(layout.head)
    if layout.ends:
        end = layout.ends[-1]
    elif layout.known is not None and layout.n_known:  # every message known: a retry
        end = layout.known.ends[layout.n_known - 1]
    return msgspec.Raw(b"[" + raw[start:end] + b"]")


def read_body(raw: bytes | dict[str, Any], known: KnownRequest | None) -> RequestBody:
    """The body, read once: past the messages it shares with the session's previous request when it can
    be (``request_prefix``), with where its messages are (None when they cannot be located)."""
    if not isinstance(raw, bytes):
        return RequestBody(decode_body(raw), None)
    return RequestBody(*_decode_bytes(raw, known))


def _decode_bytes(raw: bytes, known: KnownRequest | None) -> tuple[ChatBody, Layout | None]:
    """The fields of a raw body, and where its messages are: past the known messages when it shares some
    (one decode of the spliced body), else decoded in full (a failed spliced decode too, so that the
    refusal names the positions of the original body)."""
    cut = request_prefix.split(raw, known)
    if cut is not None:
        try:
            body = _decoder.decode(cut.spliced)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            pass  # decoded in full below
        else:
            layout = cut.layout(raw)
            if layout is not None and body.messages is not None and len(body.messages) == len(layout.ends):
                return body, layout
    body = decode_body(raw)
    layout = request_prefix.layout_of(raw) if body.messages is not None else None
    if layout is not None and len(layout.ends) != len(body.messages or ()):
        layout = None
    return body, layout


def _call_kind(raw: Any) -> tuple[CallKind, bool]:
    if raw is None:
        return CallKind.AGENT_TURN, False
    try:
        return CallKind(raw), True
    except ValueError:
        allowed = ", ".join(k.value for k in CallKind)
        raise bad_request(f"{CALL_KIND_FIELD}={raw!r}: expected one of {allowed}") from None


def _sampling(body: ChatBody, session: Session) -> dict[str, Any]:
    params = dict(session.sampling)
    for openai_name, sglang_name in _OPENAI_TO_SGLANG.items():
        value = getattr(body, openai_name)
        if value is not None:
            params[sglang_name] = value
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise bad_request(f"max_tokens={max_tokens!r}: expected a positive integer")
        params["max_new_tokens"] = max_tokens
    params["temperature"] = session.temperature
    try:  # the engine's own rules: a request it would refuse is refused here, naming the field
        SamplingParams.from_request(params)
    except SamplingError as e:
        raise bad_request(str(e)) from None
    return params
