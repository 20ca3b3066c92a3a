"""The template, pad expansion and incremental rendering against the real transformers processor."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from cua_stream.errors import Refusal
from cua_stream.gateway.messages import Message, assistant_reply, parse_messages
from cua_stream.gateway.mismatch import MismatchType, compare
from cua_stream.gateway.rendering import Renderer
from cua_stream.gateway.template import render
from cua_stream.models.tiny import IM_END_ID, IM_START_ID, IMAGE_PAD_ID
from tests.unit.gateway_support import (
    data_url,
    png_bomb,
    qwen_processor,
    renderer,
    screenshot_bytes,
    screenshot_url,
    user_turn,
)

__all__ = ["qwen_processor", "renderer"]  # fixtures

SIZES = [(320, 180), (1280, 720), (800, 600), (1000, 100), (50, 40)]


def conversation(n_turns: int) -> list[dict[str, Any]]:
    msgs = [user_turn("Task: open the settings page.", screenshot_url(0))]
    for i in range(1, n_turns):
        msgs.append({"role": "assistant", "content": f'{{"action": {{"type": "click", "x": {i}, "y": 2}}}}'})
        msgs.append(user_turn("", screenshot_url(i)))
    return msgs


def test_processor_chat_template_renders_exactly_like_the_gateway(qwen_processor: Any) -> None:
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and now?"}]},
    ]
    hf = qwen_processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert hf == render(msgs, add_generation_prompt=True)
    assert hf == (
        "<|im_start|>system\nbe brief<|im_end|>\n"
        "<|im_start|>user\nlook<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
        "<|im_start|>assistant\nok<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>and now?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_each_message_renders_independently_of_its_neighbours() -> None:
    msgs = conversation(4)
    whole = render(msgs, add_generation_prompt=True)
    for cut in range(1, len(msgs)):
        assert (
            render(msgs[:cut], add_generation_prompt=False) + render(msgs[cut:], add_generation_prompt=True)
            == whole
        )


@pytest.mark.parametrize("size", SIZES)
def test_pad_expansion_and_grid_match_the_processor_pixel_path(
    qwen_processor: Any, renderer: Renderer, size: tuple[int, int]
) -> None:
    png = screenshot_bytes(3, size, fmt="PNG")
    msgs = parse_messages([user_turn("what is on screen?", f"data:image/png;base64,{_b64(png)}")])
    text = renderer.render_text(msgs, add_generation_prompt=True)
    expected = qwen_processor(text=[text], images=[Image.open(io.BytesIO(png))], return_tensors="pt")
    assert list(renderer.render_full(msgs, add_generation_prompt=True)) == expected["input_ids"][0].tolist()
    prepared = renderer.prepare_image(msgs[0].images()[0])
    data, ref = prepared.stored()
    assert list(ref.grid_thw or ()) == expected["image_grid_thw"][0].tolist()
    assert (ref.width, ref.height) == size and data == png
    assert ref.mime == "image/png" and ref.size == len(png)


def test_a_screenshot_is_50_to_220_image_tokens(renderer: Renderer) -> None:
    msgs = parse_messages([user_turn("", screenshot_url(1, (1280, 720)))])
    assert renderer.prepare_image(msgs[0].images()[0]).n_tokens == 220
    msgs = parse_messages([user_turn("", screenshot_url(1, (320, 180)))])
    assert 50 <= renderer.prepare_image(msgs[0].images()[0]).n_tokens < 220


def _canonical_completion(renderer: Renderer, text: str, *, stopped: bool) -> list[int]:
    return [*renderer.encode(text), *([IM_END_ID] if stopped else [])]


@pytest.mark.parametrize("stopped", [True, False])
def test_incremental_ids_equal_a_full_rerender_when_replies_tokenize_canonically(
    renderer: Renderer, stopped: bool
) -> None:
    msgs = parse_messages(conversation(5))
    accumulated: list[int] = []
    start = 0
    previous_completion: list[int] | None = None
    for end in range(1, len(msgs) + 1, 2):  # each user turn ends a request
        delta = renderer.render_delta(msgs[start:end], after_completion=previous_completion)
        accumulated += list(delta.ids)
        # with or without a sampled <|im_end|>, the glue closes the reply as the template would
        assert accumulated == list(renderer.render_full(msgs[:end], add_generation_prompt=True))
        if end < len(msgs):
            previous_completion = _canonical_completion(renderer, msgs[end].text, stopped=stopped)
            accumulated += previous_completion
            start = end + 1
    assert len(delta.images) == 1  # only the new screenshot is prepared on a later turn


def test_glue_closes_a_reply_the_template_way(renderer: Renderer) -> None:
    assert renderer.glue_after([5, IM_END_ID]) == "\n"
    assert renderer.glue_after([5, 6]) == "<|im_end|>\n"
    assert renderer.glue_after([]) == "<|im_end|>\n"


def test_pad_count_mismatch_is_refused(renderer: Renderer) -> None:
    from cua_stream.gateway.refusal import Refusal

    with pytest.raises(Refusal):
        renderer.expand_image_pads([1, IMAGE_PAD_ID, 2], [])
    with pytest.raises(Refusal):
        renderer.expand_image_pads([1, 2], [4])
    assert list(renderer.expand_image_pads([1, IMAGE_PAD_ID, 2], [3])) == [1, *[IMAGE_PAD_ID] * 3, 2]


def _mismatch(renderer: Renderer, accumulated: list[int], rendered: list[int]) -> set[MismatchType]:
    return compare(
        accumulated,
        rendered,
        special_ids=renderer.special_ids,
        im_start_id=IM_START_ID,
        assistant_header=renderer.encode("assistant\n"),
        decode=renderer.tokenizer.decode,
    )


def test_mismatch_types(renderer: Renderer) -> None:
    msgs: list[Message] = [*parse_messages([user_turn("hello there")]), assistant_reply("general kenobi")]
    rendered = list(renderer.render_full(msgs, add_generation_prompt=False))
    assert _mismatch(renderer, rendered, rendered) == set()
    # the reply sampled as single characters: same text, other ids → benign
    prompt = list(renderer.render_full(msgs[:1], add_generation_prompt=True))
    spelled = [t for ch in "general kenobi" for t in renderer.encode(ch)]
    assert spelled != renderer.encode("general kenobi")
    accumulated = [*prompt, *spelled, IM_END_ID, *renderer.encode("\n")]
    assert _mismatch(renderer, accumulated, rendered) == {MismatchType.ASSISTANT_TEXT}
    # user text differs → a bug
    other_user = list(
        renderer.render_full([*parse_messages([user_turn("hello")]), msgs[1]], add_generation_prompt=False)
    )
    assert _mismatch(renderer, other_user, rendered) == {MismatchType.NON_ASSISTANT_TEXT}
    # a special token sampled mid-reply → structure differs
    extra = [*prompt, *renderer.encode("general"), IM_START_ID, IM_END_ID, *renderer.encode("\n")]
    assert _mismatch(renderer, extra, rendered) == {MismatchType.SPECIAL_TOKEN_COUNT}
    swapped = [IM_END_ID if t == IM_START_ID else t for t in rendered]
    assert _mismatch(renderer, swapped, rendered) == {MismatchType.SPECIAL_TOKEN_TYPE}


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b64: "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76)),  # `base64` without -w0
        lambda b64: b64.rstrip("="),  # missing padding
        lambda b64: b64 + "AAAA!!",  # trailing junk
    ],
    ids=["line-breaks", "no-padding", "trailing-junk"],
)
def test_base64_that_the_engine_refuses_is_refused_here_too(renderer: Renderer, mangle: Any) -> None:
    import base64

    from cua_stream.engine.runner import EngineInputError, decode_image_data

    png = next(p for i in range(9) if len(p := screenshot_bytes(i, (1280, 720), fmt="PNG")) % 3)
    url = f"data:image/png;base64,{mangle(base64.b64encode(png).decode())}"
    with pytest.raises(Refusal, match="strict base64"):  # from the header read, or else the full decode
        renderer.prepare_image(parse_messages([user_turn("", url)])[0].images()[0]).stored()
    with pytest.raises(EngineInputError, match="strict base64"):  # the engine's rule is the same one
        decode_image_data(url)


def test_the_recorded_mime_type_comes_from_the_bytes_not_the_label(renderer: Renderer) -> None:
    png = screenshot_bytes(3, (320, 180), fmt="PNG")
    msgs = parse_messages([user_turn("", data_url(png, "image/webp"))])  # Harbor labels by file suffix
    assert renderer.prepare_image(msgs[0].images()[0]).stored()[1].mime == "image/png"


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(renderer: Renderer) -> None:
    bomb = png_bomb()
    assert len(bomb) < 100_000
    msgs = parse_messages([user_turn("", data_url(bomb, "image/png"))])
    with pytest.raises(Refusal, match="over the limit"):
        renderer.prepare_image(msgs[0].images()[0])
