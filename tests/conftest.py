"""Session-wide test settings. Offline by construction: no hub downloads, no litellm cost-map fetch."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    # aiokafka is asyncio-only.
    return "asyncio"
