"""Launch presets: one name → the resolved configuration of every daemon. Pure (no file, no network).

A preset is a set of settings per config section (``engine``, ``gateway``, ``producer``, ``scorer``,
``trainer``) over each daemon's own defaults; a user's config file goes over the preset. Resolving checks
every key against the daemon's config struct (an unknown key is refused, naming it) and, when the model
directory is on this machine, builds the structs themselves (types and ranges checked at launch, not at
the first use).

``miles_argv`` is the same run in the source pull request's launcher vocabulary (Miles/slime flags), so
a run can be compared flag for flag: the session path is ``agentic_train_args(session_images=True)``
(``--use-session-server v2 --use-session-images``) plus ``--rollout-path session --tito-model qwen3_vl
--max-seq-len 32768``; the default generate path adds nothing, so its argv is unchanged.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from cua_stream.app.demo import DemoPlan, demo_settings
from cua_stream.config import ConfigError, convert, section_class

RolloutPath = Literal["generate", "session"]
SECTIONS = ("engine", "gateway", "producer", "scorer", "trainer")
"""The daemons' sections a launch resolves (their classes: ``cua_stream.config.SECTIONS``)."""
SESSION_MAX_SEQ_LEN = 32768


def agentic_train_args(*, session_images: bool = False) -> list[str]:
    """The flags an agentic (session) rollout adds in the source launcher; images need v2 sessions."""
    args = ["--use-session-server", "v2"]
    if session_images:
        args.append("--use-session-images")
    return args


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    rollout_path: RolloutPath = "generate"
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def miles_argv(self) -> list[str]:
        if self.rollout_path == "generate":
            return []  # the default path: unchanged
        return [
            "--rollout-path",
            "session",
            *agentic_train_args(session_images=True),
            "--tito-model",
            "qwen3_vl",
            "--max-seq-len",
            str(SESSION_MAX_SEQ_LEN),
        ]


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("default", "every daemon's own defaults (the generate path's argv is unchanged)"),
        Preset(
            "session-qwen3vl",
            "the source pull request's session path: Qwen3-VL computer-1 episodes through the session "
            "gateway (TITO, images), 32k sequences",
            "session",
            {
                "gateway": {"context_length": SESSION_MAX_SEQ_LEN, "template_path": ""},  # qwen3_vl template
                "producer": {"environment": "local-desktop", "max_input_tokens": SESSION_MAX_SEQ_LEN},
                "trainer": {"max_seq_len": SESSION_MAX_SEQ_LEN},
            },
        ),
        Preset(
            "local-demo",
            "what `cua-stream demo` runs: the tiny model, 2 desktops, one group of 2 episodes per step",
            "session",
            demo_settings(DemoPlan()),
        ),
    )
}


def preset(name: str) -> Preset:
    if name not in PRESETS:
        near = difflib.get_close_matches(name, PRESETS, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ConfigError(f"--preset: unknown preset {name!r}; {hint}known: {', '.join(PRESETS)}")
    return PRESETS[name]


def _defaults(cls: type[msgspec.Struct]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.name == "bus":
            continue  # the [bus] section, shared
        if f.default is not msgspec.NODEFAULT:
            out[f.name] = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None  # required: the preset or the user sets it
    return out


def resolve(
    chosen: Preset, file_data: Mapping[str, Any] | None = None, *, model_path: str = ""
) -> dict[str, Any]:
    """Every daemon's settings: defaults < preset < ``file_data``; plus the run's launcher argv."""
    file_data = file_data or {}
    resolved: dict[str, Any] = {}
    for section in SECTIONS:
        cls = section_class(section)  # the registry's: config.SECTIONS
        values = _defaults(cls)
        for layer, where in ((chosen.settings.get(section, {}), f"preset {chosen.name}"),
                             (file_data.get(section, {}) or {}, "config file")):  # fmt: skip
            for key, value in layer.items():
                if key not in values:
                    raise ConfigError(f"{section}.{key}: unknown field (from the {where})")
                values[key] = value
        if "model_path" in values and model_path and not values["model_path"]:
            values["model_path"] = model_path
        if "run_id" in values and not values["run_id"]:
            values["run_id"] = "run"
        resolved[section] = _checked(section, cls, values)
    resolved["launch"] = {
        "preset": chosen.name,
        "rollout_path": chosen.rollout_path,
        "miles_argv": chosen.miles_argv(),
    }
    return resolved


def _checked(section: str, cls: type[msgspec.Struct], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with their types checked by the daemon's own struct; a config that needs a model
    directory is checked only when the directory is on this machine (a GPU host's model is not)."""
    model = values.get("model_path")
    if "model_path" in values and not (model and (Path(model) / "config.json").exists()):
        return values
    built = convert(cls, section, values)
    return {k: v for k, v in msgspec.structs.asdict(built).items() if k != "bus"}


def redacted(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``resolved`` safe to print or write: every key-like setting's value shown as ``***``."""
    out: dict[str, Any] = {}
    for section, values in resolved.items():
        out[section] = {
            k: "***" if v and k.endswith(("key", "secret", "password", "token")) else v
            for k, v in values.items()
        }
    return out
