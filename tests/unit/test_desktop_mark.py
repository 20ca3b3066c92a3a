"""Desktop tests skip by one rule, their ``desktop`` mark (``tests/conftest.py``), not each by its own
condition: two end-to-end tests that need the local desktop had none and failed off root."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import desktop_skip

TESTS = Path(__file__).resolve().parents[1]


def nowhere(program: str) -> str | None:
    return None


def everywhere(program: str) -> str | None:
    return f"/usr/bin/{program}"


def test_the_local_desktop_skips_off_root_and_runs_as_root() -> None:
    assert "needs root" in (desktop_skip({}, root=False, which=everywhere) or "")
    assert desktop_skip({}, root=True, which=nowhere) is None  # a missing program fails, it does not skip


def test_a_bare_x_server_test_needs_its_programs_only() -> None:
    needs = {"root": False, "programs": ("Xvfb", "import")}
    assert desktop_skip(needs, root=False, which=everywhere) is None
    only_xvfb = {"Xvfb": "/usr/bin/Xvfb"}.get
    assert desktop_skip(needs, root=True, which=only_xvfb) == (
        "needs import (`cua-stream desktop doctor` names their packages)"
    )


def test_every_desktop_test_leaves_its_skip_to_the_mark() -> None:
    others = [p for p in TESTS.rglob("test_*.py") if p != Path(__file__).resolve()]
    marked = [p for p in others if "pytest.mark.desktop" in p.read_text()]
    assert {"test_learn.py", "test_demonstrations.py", "test_local_desktop.py"} <= {p.name for p in marked}
    assert [p.name for p in marked if "geteuid" in p.read_text()] == []
