"""Qwen3-VL's 0..999 grid: the prompt says it, the provider marks it, Harbor's runtime maps it."""

from __future__ import annotations

import json

import pytest
from harbor.agents.computer_1.providers.generic import GenericJsonProvider
from harbor.agents.computer_1.runtime import DisplayGeometry, normalize_completion_action
from harbor.llms.base import LLMResponse

from cua_stream.binding.coordinates import PIXEL_PHRASES, PromptTemplateChanged, normalized_prompt
from cua_stream.binding.qwen3vl import Qwen3VLJsonProvider

pytestmark = pytest.mark.harbor

GEOMETRY = DisplayGeometry(desktop_width=1366, desktop_height=768)


def provider(cls: type[GenericJsonProvider] = Qwen3VLJsonProvider) -> GenericJsonProvider:
    return cls(model_name="openai/q", desktop_width=1366, desktop_height=768)


def desktop_action(action: dict, cls: type[GenericJsonProvider] = Qwen3VLJsonProvider) -> tuple:
    """The desktop pixels Harbor's runtime would act on for a model reply with ``action``."""
    reply = json.dumps({"analysis": "", "plan": "", "action": action})
    step = provider(cls).parse(LLMResponse(content=reply))
    assert step.action is not None
    mapped = normalize_completion_action(step.action, GEOMETRY)
    return mapped.x, mapped.y, mapped.end_x, mapped.end_y, mapped.zoom_region


@pytest.mark.parametrize(
    ("model_xy", "pixels"),
    [
        ((0, 0), (0, 0)),
        ((999, 999), (1365, 767)),
        ((500, 500), (683, 384)),
        ((250, 750), (342, 576)),
        ((1500, -20), (1365, 0)),  # off the grid: clamped to the desktop
    ],
)
def test_click_maps_from_the_grid_to_desktop_pixels(
    model_xy: tuple[int, int], pixels: tuple[int, int]
) -> None:
    x, y, *_ = desktop_action({"type": "click", "x": model_xy[0], "y": model_xy[1]})
    assert (x, y) == pixels


def test_drag_and_zoom_map_every_coordinate() -> None:
    _, _, end_x, end_y, _ = desktop_action({"type": "drag", "x": 0, "y": 0, "end_x": 999, "end_y": 500})
    assert (end_x, end_y) == (1365, 384)
    *_, zoom = desktop_action({"type": "zoom", "zoom_region": [0, 0, 500, 500]})
    assert zoom == [0, 0, 683, 384]


def test_stock_provider_would_click_raw_pixels() -> None:
    # Without our provider the same reply lands in the top-left third of the screen.
    x, y, *_ = desktop_action({"type": "click", "x": 500, "y": 500}, GenericJsonProvider)
    assert (x, y) == (500, 500)


def test_unparsable_reply_has_no_action_to_mark() -> None:
    step = provider().parse(LLMResponse(content="no json here"))
    assert step.needs_retry and step.action is None


def test_prompt_states_the_grid_and_no_pixels() -> None:
    text = provider().record_text("Open the settings.")
    assert "normalized 0-999 grid" in text
    assert "(500, 500) is the centre of the screen" in text
    assert '"x": <int 0-999, optional>' in text
    for phrase in PIXEL_PHRASES:
        assert phrase not in text
    stock = provider(GenericJsonProvider).record_text("Open the settings.")
    assert "raw desktop pixels" in stock


def test_template_drift_is_refused() -> None:
    stock = provider(GenericJsonProvider)._prompt_template
    with pytest.raises(PromptTemplateChanged):
        normalized_prompt(stock.replace("raw desktop pixels (no normalization)", "pixels"))
    with pytest.raises(PromptTemplateChanged):
        normalized_prompt(stock + "\nClick in desktop pixels.\n")


def parsed(action: dict) -> object:
    reply = json.dumps({"analysis": "", "plan": "", "action": action})
    return provider().parse(LLMResponse(content=reply))


@pytest.mark.parametrize(
    ("action", "named"),
    [
        ({"type": "click", "x": 500}, "'x' was given without 'y'"),
        ({"type": "click", "y": 500}, "'y' was given without 'x'"),
        ({"type": "drag", "x": 1, "y": 2, "end_x": 900}, "'end_x' was given without 'end_y'"),
        ({"type": "drag", "x": 1, "y": 2, "end_y": 900}, "'end_y' was given without 'end_x'"),
        ({"type": "zoom", "zoom_region": [500, 0, 400, 100]}, "enclose an area"),
    ],
)
def test_a_half_given_coordinate_is_a_parse_error_the_model_sees(action: dict, named: str) -> None:
    step = parsed(action)
    assert step.action is None and step.needs_retry  # type: ignore[attr-defined]
    assert step.feedback.startswith("ERROR: ") and named in step.feedback  # type: ignore[attr-defined]


def test_whole_pairs_and_actions_without_coordinates_still_parse() -> None:
    for action in ({"type": "click", "x": 1, "y": 2}, {"type": "type", "text": "hi"}, {"type": "wait"}):
        assert parsed(action).action is not None  # type: ignore[attr-defined]


def test_the_prompt_says_what_the_code_does_about_drags_and_zooms() -> None:
    from harbor.agents.computer_1.providers.generic import GenericJsonProvider

    text = provider()._prompt_template  # type: ignore[attr-defined]
    assert '"end_x": <int 0-999' in text and '"end_y": <int 0-999' in text
    assert "no resize" not in text and "native pixel density" not in text
    assert "enlarged" in text and "whole screen's 0-999 grid" in text
    assert (
        "no resize" in GenericJsonProvider(model_name="m", desktop_width=1, desktop_height=1)._prompt_template
    )
