"""The project's Qwen3-VL chat template: loading and rendering (pure, no I/O beyond reading the package file).

We own the template (``templates/qwen3_vl.jinja``) rather than vendor one: no official template ships
offline, and the gateway depends on one property the file documents, that each message renders
independently of its neighbours. ``TEMPLATE_VERSION`` changes whenever the rendered bytes would; the
tiny model saves the same source as its ``chat_template`` so ``processor.apply_chat_template`` and the
gateway agree (a unit test checks it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATE_NAME = "qwen3_vl.jinja"
TEMPLATE_VERSION = 1


@cache
def template_source() -> str:
    """The Jinja source of the project's Qwen3-VL chat template."""
    return resources.files("cua_stream.gateway").joinpath("templates", TEMPLATE_NAME).read_text()


def compile_template(source: str) -> jinja2.Template:
    # The same environment flags transformers uses for chat templates, so both render identically.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False)
    return env.from_string(source)


@cache
def _default_template() -> jinja2.Template:
    return compile_template(template_source())


def render(
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    template: jinja2.Template | None = None,
) -> str:
    """Render chat messages (OpenAI/HF shape: role + string or list-of-parts content) to prompt text."""
    tpl = template if template is not None else _default_template()
    return tpl.render(messages=messages, add_generation_prompt=add_generation_prompt)
