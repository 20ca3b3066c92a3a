"""Version arithmetic has one home (``cua_stream.versions``): the version a train step trained from."""

from __future__ import annotations

import re
from pathlib import Path

from cua_stream.versions import staleness, trained_from

ROOT = Path(__file__).resolve().parents[2]
BY_HAND = re.compile(r"\b(policy|trained)_version\s*-\s*1\b")


def test_a_step_trained_from_the_version_before_the_one_it_produced() -> None:
    assert trained_from(1) == 0  # the first step trained the start model
    assert trained_from(7) == 6
    assert staleness(trained_from(7), 6) == 0  # on-policy: issued under the weights the step trained


def test_no_module_computes_the_version_a_step_trained_from_by_hand() -> None:
    modules = [
        p for package in ("cua_stream", "consumers", "producers") for p in (ROOT / package).rglob("*.py")
    ]
    assert len(modules) > 100  # the walk found the packages
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in modules
        if p.name != "versions.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if BY_HAND.search(line)
    ]
    assert offenders == []
