"""The dashboard's page files: the vendored charting library is the pinned release, byte for byte
(``consumers/dashboard/vendor/SHA256SUMS``, re-checked against npm by ``scripts/vendor-charts.sh``); every
page file ships in the wheel (the package-data globs match it); and the app serves each under its path
with its content type and the security headers."""

from __future__ import annotations

import hashlib
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import httpx
import pytest

from consumers.dashboard.config import DashboardConfig
from consumers.dashboard.server import _ASSETS, build_app

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "consumers" / "dashboard"
VENDOR = DASHBOARD / "vendor"


def pinned_sums() -> dict[str, str]:
    lines = (VENDOR / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split() for line in lines if line.strip())}


def test_the_vendored_files_are_the_pinned_release_byte_for_byte() -> None:
    sums = pinned_sums()
    assert set(sums) == {"uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"}
    for name, digest in sums.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    version = re.search(r"^VERSION=(\S+)$", (ROOT / "scripts" / "vendor-charts.sh").read_text(), re.M)
    assert version, "scripts/vendor-charts.sh pins VERSION"
    assert f"(v{version.group(1)})" in (VENDOR / "uPlot.iife.min.js").read_text()[:200]
    assert "MIT License" in (VENDOR / "uPlot.LICENSE").read_text()


def test_every_page_file_ships_in_the_wheel() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = globs["consumers"]
    page_files = [
        p.relative_to(ROOT / "consumers").as_posix()
        for p in DASHBOARD.rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    ]
    assert "dashboard/vendor/uPlot.iife.min.js" in page_files
    assert [f for f in page_files if not any(fnmatch(f, g) for g in shipped)] == []
    assert {name for name, _ in _ASSETS.values()} <= {f.removeprefix("dashboard/") for f in page_files}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "file", "content_type"),
    [
        ("/vendor/uPlot.iife.min.js", "vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
        ("/vendor/uPlot.min.css", "vendor/uPlot.min.css", "text/css; charset=utf-8"),
        ("/charts.js", "charts.js", "text/javascript; charset=utf-8"),
        ("/", "page.html", "text/html; charset=utf-8"),
    ],
)
async def test_the_app_serves_each_page_file_with_its_type(
    path: str, file: str, content_type: str, tmp_path: Path
) -> None:
    app = build_app(DashboardConfig(blob_dir=str(tmp_path)))  # its lifespan (the topic reader) is not run
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash") as http:
        r = await http.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"] == content_type
    assert r.content == (DASHBOARD / file).read_bytes()
    assert "script-src 'self'" in r.headers["content-security-policy"]
