"""Qwen3-VL's coordinate convention, as prompt text for computer-1's JSON harness.

Qwen3-VL grounds on a relative grid (0..999 on each axis) rather than on screenshot pixels, and the grid
survives any resize of the screenshot, which matters because ``screenshots`` resizes every image to a
multiple of 32. Harbor's runtime already converts such coordinates: an action whose ``source`` is
``CoordinateSpace.NORMALIZED_0_999`` has x, y, end_x, end_y and zoom_region mapped by
``round(v * (side - 1) / 999)`` and clamped to the desktop before any xdotool command runs. So the
provider only has to mark its actions and the prompt only has to say so; this module holds the prompt
half.

Harbor's stock template (``computer-1-json.txt``) tells the model to use raw desktop pixels in four
places. ``normalized_prompt`` rewrites exactly those sentences and refuses to run if any of them is
missing, so a Harbor upgrade that rewords the template fails loudly instead of sending a prompt that
contradicts itself.
"""

from __future__ import annotations

from typing import Any

from cua_stream.errors import PromptTemplateChanged

__all__ = ["GRID_MAX", "PIXEL_PHRASES", "PromptTemplateChanged", "coordinate_problem", "normalized_prompt"]

GRID_MAX = 999
"""Largest coordinate on the normalized grid (Harbor's ``NORMALIZED_0_999``)."""

_REWRITES: tuple[tuple[str, str], ...] = (
    (
        "All click/move/scroll/drag\ncoordinates you produce MUST be in raw desktop pixels (no normalization).",
        "All click/move/scroll/drag/zoom\n"
        "coordinates you produce MUST be on a normalized 0-999 grid, whatever the\n"
        "screenshot's size: x=0 is the left edge and x=999 the right edge, y=0 the\n"
        "top edge and y=999 the bottom edge, so (500, 500) is the centre of the screen.",
    ),
    ('"x": <int, optional>,', '"x": <int 0-999, optional>,'),
    ('"y": <int, optional>,', '"y": <int 0-999, optional>,'),
    (
        '"zoom_region": <[x0, y0, x1, y1] in desktop pixels,',
        '"zoom_region": <[x0, y0, x1, y1] on the 0-999 grid,',
    ),
    (
        'provide raw desktop pixel\n  coordinates in "x"/"y"',
        'provide normalized 0-999\n  coordinates in "x"/"y"',
    ),
    (
        'provide "zoom_region" as [x0, y0, x1, y1] in desktop pixels.',
        'provide "zoom_region" as [x0, y0, x1, y1] on the 0-999 grid.',
    ),
    ('"end_x": <int, optional, only for drag>,', '"end_x": <int 0-999, optional, only for drag>,'),
    ('"end_y": <int, optional, only for drag>,', '"end_y": <int 0-999, optional, only for drag>,'),
    (
        # The binding scales every screenshot to the 32-pixel grid within its pixel budget, so a crop is
        # enlarged, not shown as is; and later actions still address the whole screen.
        "The NEXT screenshot is cropped (no resize) to that region, then auto-resets.\n"
        "  Use this to inspect a small UI area at native pixel density.",
        "The NEXT screenshot shows only that region, enlarged to fill the screenshot,\n"
        "  then it auto-resets. Use this to inspect a small UI area in detail. Coordinates\n"
        "  you give afterwards still refer to the whole screen's 0-999 grid, not the crop.",
    ),
)

PIXEL_PHRASES = ("raw desktop pixel", "in desktop pixels", "no resize", "native pixel density")
"""Phrases of the stock template that must not survive the rewrite."""


_PAIRS = (("x", "y"), ("end_x", "end_y"))


def coordinate_problem(action: Any) -> str | None:
    """Why an action's coordinates cannot be executed as the model meant them, or None.

    Harbor's runtime maps a coordinate pair to the grid only when both halves are given; a lone ``x``
    (or ``end_x``) would otherwise be executed as raw desktop pixels. Such an action, and a zoom region
    that is not four numbers enclosing an area, become a parse error the model sees and can correct.
    """
    for a, b in _PAIRS:
        given = [name for name in (a, b) if getattr(action, name, None) is not None]
        if len(given) == 1:
            missing = b if given == [a] else a
            return f"'{given[0]}' was given without '{missing}': give both coordinates on the 0-999 grid"
    region = getattr(action, "zoom_region", None)
    if region is not None:
        if not isinstance(region, (list, tuple)) or len(region) != 4:
            return "'zoom_region' must be [x0, y0, x1, y1] on the 0-999 grid"
        x0, y0, x1, y1 = region
        if not (x1 > x0 and y1 > y0):
            return "'zoom_region' must enclose an area: x1 > x0 and y1 > y0"
    return None


def normalized_prompt(template: str) -> str:
    """Harbor's computer-1 JSON prompt template with every coordinate sentence on the 0-999 grid."""
    out = template
    for old, new in _REWRITES:
        if out.count(old) != 1:
            raise PromptTemplateChanged(
                f"computer-1's prompt template no longer contains {old!r} exactly once; "
                "update cua_stream.binding.coordinates for this Harbor version"
            )
        out = out.replace(old, new)
    for phrase in PIXEL_PHRASES:
        if phrase in out:
            raise PromptTemplateChanged(f"computer-1's prompt template still says {phrase!r} after rewriting")
    return out
