"""The HARBOR_* environment variables that size a computer-1 episode.

Harbor 0.26.0 reads none of these itself (no ``HARBOR_AGENT_MAX*`` or ``HARBOR_CUA*`` string exists in the
wheel); the binding reads them and turns them into constructor options. This module is a pure parser: it
takes the environment as a mapping (``cua_stream.config.environ()`` in production, a dict in tests), so
only ``cua_stream.config`` ever touches ``os.environ``.

Parsing is strict on purpose: a variable that is present but empty, signed, fractional or out of range is
almost always a templating mistake in a launch script, and silently falling back to a default would run a
whole training job with the wrong turn cap or screen size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cua_stream import env_vars
from cua_stream.config import ConfigError

MAX_ITERATIONS_VAR = env_vars.HARBOR_MAX_ITERATIONS
"""Turn cap of one episode; becomes computer-1's ``max_turns``."""
DESKTOP_WIDTH_VAR = env_vars.HARBOR_DESKTOP_WIDTH
"""Desktop (Xvfb screen) and browser window width in pixels."""
DESKTOP_HEIGHT_VAR = env_vars.HARBOR_DESKTOP_HEIGHT
"""Desktop (Xvfb screen) and browser window height in pixels."""

MAX_TURNS_RANGE = (1, 1_000_000)
"""Harbor's own "no limit" is 1,000,000 turns, so nothing above it means anything."""
DESKTOP_SIDE_RANGE = (64, 8192)
"""Below 64 px nothing is legible; above 8192 px a screenshot no longer fits any sane pixel budget."""

_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True, kw_only=True)
class HarborEnvSettings:
    """What the environment asks for; ``None`` means the variable is not set."""

    max_turns: int | None = None
    desktop_width: int | None = None
    desktop_height: int | None = None


def _parse_int(env: Mapping[str, str], name: str, bounds: tuple[int, int]) -> int | None:
    raw = env.get(name)
    if raw is None:
        return None
    low, high = bounds
    text = raw.strip()
    # int() would also accept "+5" and "1_000"; only plain digits (around whitespace) are a deliberate setting.
    if not _DIGITS.fullmatch(text):
        raise ConfigError(f"{name}: expected a whole number between {low} and {high}, got {raw!r}")
    value = int(text)
    if not low <= value <= high:
        raise ConfigError(f"{name}: {value} is out of range; expected {low}..{high}")
    return value


def parse_harbor_env(env: Mapping[str, str]) -> HarborEnvSettings:
    """Read the turn cap and desktop size from ``env``; a bad value raises ``ConfigError`` naming it."""
    return HarborEnvSettings(
        max_turns=_parse_int(env, MAX_ITERATIONS_VAR, MAX_TURNS_RANGE),
        desktop_width=_parse_int(env, DESKTOP_WIDTH_VAR, DESKTOP_SIDE_RANGE),
        desktop_height=_parse_int(env, DESKTOP_HEIGHT_VAR, DESKTOP_SIDE_RANGE),
    )
