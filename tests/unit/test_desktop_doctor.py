"""The desktop doctor reads one package list (the one the setup script installs from) and names what is
missing by its Debian package."""

from __future__ import annotations

import pytest

from cua_stream.desktop import doctor


def test_every_program_computer1_calls_is_listed_with_its_package() -> None:
    listed = {r.program: r.package for r in doctor.requirements()}
    for program in (
        "unshare",
        "nsenter",
        "Xvfb",
        "xdotool",
        "import",
        "convert",
        "cwebp",
        "wmctrl",
        "chromium",
    ):
        assert program in listed
    assert listed["cwebp"] == "webp" and listed["startxfce4"] == "xfce4-session"


def test_missing_programs_are_named_by_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.shutil, "which", lambda p: None if p in ("Xvfb", "import", "convert") else p)
    assert doctor.missing_packages() == ["imagemagick", "xvfb"]
