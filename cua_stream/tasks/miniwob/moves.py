"""The teacher's moves, in the task page's terms (its CSS pixels), and how each becomes computer-1's action
on the desktop and DevTools input on the shadow page. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("click", "drag", "hover", "type", "keys")


@dataclass(frozen=True)
class Move:
    kind: str
    """click | drag | hover (the pointer moved there) | type (text to the focused field) | keys."""
    x: float = 0.0
    y: float = 0.0
    end_x: float = 0.0
    end_y: float = 0.0
    """Where a drag ends."""
    text: str = ""
    keys: tuple[str, ...] = ()
    """A key combination, as computer-1 names keys (``("ctrl", "a")``, ``("enter",)``)."""


def click(point: tuple[float, float]) -> Move:
    return Move("click", *point)


def drag(start: tuple[float, float], end: tuple[float, float]) -> Move:
    return Move("drag", *start, end_x=end[0], end_y=end[1])


def type_text(text: str) -> Move:
    return Move("type", text=text)


def press(*keys: str) -> Move:
    return Move("keys", keys=keys)


_KEYS: dict[str, tuple[str, str, int]] = {
    "enter": ("Enter", "Enter", 13),
    "tab": ("Tab", "Tab", 9),
    "backspace": ("Backspace", "Backspace", 8),
    "delete": ("Delete", "Delete", 46),
    "escape": ("Escape", "Escape", 27),
    "space": (" ", "Space", 32),
    "up": ("ArrowUp", "ArrowUp", 38),
    "down": ("ArrowDown", "ArrowDown", 40),
    "left": ("ArrowLeft", "ArrowLeft", 37),
    "right": ("ArrowRight", "ArrowRight", 39),
    "home": ("Home", "Home", 36),
    "end": ("End", "End", 35),
}
"""computer-1's key names → DevTools' key, code and Windows virtual key code."""
_MODIFIERS = {"alt": 1, "ctrl": 2, "super": 4, "shift": 8}
"""DevTools' modifier bits."""


def key_events(keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """DevTools ``Input.dispatchKeyEvent`` parameters for pressing ``keys`` together (modifiers first, as
    xdotool's ``key ctrl+a`` does): the last key down and up with the modifiers held."""
    *mods, last = (k.lower() for k in keys)
    bits = sum(_MODIFIERS[m] for m in mods)
    if last in _KEYS:
        key, code, vk = _KEYS[last]
    elif len(last) == 1:
        key, code, vk = last, f"Key{last.upper()}" if last.isalpha() else "", ord(last.upper())
    else:
        raise ValueError(f"no DevTools key for {last!r}")
    down: dict[str, Any] = {"type": "rawKeyDown" if bits & 3 else "keyDown", "key": key, "code": code,
                            "windowsVirtualKeyCode": vk, "modifiers": bits}  # fmt: skip
    if not bits & 3 and (key == "Enter" or len(key) == 1):
        down["text"] = "\r" if key == "Enter" else key
    return [down, {"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk, "modifiers": bits}]
