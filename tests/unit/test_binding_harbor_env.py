"""HARBOR_* variables -> turn cap and desktop size; bad values name the variable."""

from __future__ import annotations

import pytest

from cua_stream.binding.harbor_env import (
    DESKTOP_HEIGHT_VAR,
    DESKTOP_WIDTH_VAR,
    MAX_ITERATIONS_VAR,
    HarborEnvSettings,
    parse_harbor_env,
)
from cua_stream.config import ConfigError


def test_unset_variables_leave_everything_to_the_defaults() -> None:
    assert parse_harbor_env({"PATH": "/usr/bin", "HARBOR_OTHER": "x"}) == HarborEnvSettings()


def test_set_variables_are_read() -> None:
    env = {MAX_ITERATIONS_VAR: "30", DESKTOP_WIDTH_VAR: "1280", DESKTOP_HEIGHT_VAR: " 800\n"}
    assert parse_harbor_env(env) == HarborEnvSettings(max_turns=30, desktop_width=1280, desktop_height=800)


def test_each_variable_is_independent() -> None:
    assert parse_harbor_env({DESKTOP_HEIGHT_VAR: "720"}) == HarborEnvSettings(desktop_height=720)


@pytest.mark.parametrize("name", [MAX_ITERATIONS_VAR, DESKTOP_WIDTH_VAR, DESKTOP_HEIGHT_VAR])
@pytest.mark.parametrize(
    "value", ["", "  ", "abc", "-5", "+5", "0", "12.5", "1e3", "1_000", "0x40", "99999999"]
)
def test_bad_value_is_an_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        parse_harbor_env({name: value})


def test_bounds() -> None:
    assert parse_harbor_env({MAX_ITERATIONS_VAR: "1"}).max_turns == 1
    assert parse_harbor_env({MAX_ITERATIONS_VAR: "1000000"}).max_turns == 1_000_000
    assert parse_harbor_env({DESKTOP_WIDTH_VAR: "64"}).desktop_width == 64
    with pytest.raises(ConfigError, match=f"{DESKTOP_WIDTH_VAR}: 63 is out of range"):
        parse_harbor_env({DESKTOP_WIDTH_VAR: "63"})
    with pytest.raises(ConfigError, match=MAX_ITERATIONS_VAR):
        parse_harbor_env({MAX_ITERATIONS_VAR: "1000001"})
