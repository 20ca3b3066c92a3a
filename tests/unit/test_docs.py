"""The documentation: the README stays a front door, the CLI and config references are generated from the
code and current, every command, option and config field has help text, `--help` lists the commands by
job, and the MkDocs site builds with warnings as errors (links and anchors checked)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "reference"
PAGES = ("cli.md", "config.md", "environment.md")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The reference pages written afresh from the code (in a process of their own: it imports every
    command), and what the generator said."""
    out = tmp_path_factory.mktemp("reference")
    done = subprocess.run(
        [sys.executable, "-m", "cua_stream.docs_reference", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done, out


def test_every_command_option_and_config_field_has_help_text(generated) -> None:
    done, _ = generated
    assert done.returncode == 0, done.stderr
    assert "no help text" not in done.stderr


@pytest.mark.parametrize("page", PAGES)
def test_the_committed_reference_is_what_the_code_generates(generated, page: str) -> None:
    _, out = generated
    assert (out / page).read_text() == (REFERENCE / page).read_text(), (
        f"docs/reference/{page} is stale: run python -m cua_stream.docs_reference docs/reference"
    )


def test_the_config_reference_has_every_section_and_field() -> None:
    import msgspec

    from cua_stream.config import SECTIONS
    from cua_stream.docs_reference import config_sections

    sections = config_sections()
    assert list(sections) == list(SECTIONS) and len(sections) == 10
    text = (REFERENCE / "config.md").read_text()
    for section, cls in sections.items():
        assert f"## [{section}]" in text
        for field in msgspec.structs.fields(cls):
            if field.name != "bus":
                assert f"| `{field.name}` |" in text.split(f"## [{section}]")[1].split("\n## ")[0], field.name


def test_help_lists_the_commands_by_job_every_command_once() -> None:
    from cua_stream.cli import PANELS, SUBCOMMANDS

    listed = [name for names in PANELS.values() for name in names]
    assert sorted(listed) == sorted(SUBCOMMANDS)
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "cua_stream", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    shown = re.findall(r"^│ ([a-z][a-z-]*)\s", done.stdout, re.MULTILINE)
    assert shown == list(SUBCOMMANDS) == listed, shown
    panels = re.findall(r"╭─ (.+?) ─", done.stdout)
    assert panels[-len(PANELS) :] == list(PANELS)
    assert shown[0] == "demo"


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    # The module map comes within the first 600 words, and is at most 15 lines.
    before_map = text.split("## Where the code is")[0]
    assert len(before_map.split()) <= 600
    code_map = text.split("## Where the code is")[1].split("```")[1]
    assert len(code_map.strip().splitlines()) <= 15
    # The two commands, as .ci/run and the tests rely on them.
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_every_docs_link_in_the_readme_resolves() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).is_file()]
    assert missing == []


def mkdocs() -> str:
    """The mkdocs of this interpreter's environment (scripts/setup.sh installs the ``docs`` extra)."""
    beside = Path(sys.executable).with_name("mkdocs")
    found = str(beside) if beside.is_file() else shutil.which("mkdocs")
    assert found, "mkdocs is not installed: run scripts/setup.sh (it installs the docs extra)"
    return found


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    done = subprocess.run(
        [mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    for page in (
        "index.html",
        "tutorials/first-run/index.html",
        "reference/cli/index.html",
        "search/search_index.json",
    ):
        assert (tmp_path / "site" / page).is_file(), page
