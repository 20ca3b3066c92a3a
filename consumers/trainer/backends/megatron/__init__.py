"""Code that runs in megatron-bridge's venv, not cua-stream's (megatron-bridge pins a transformers that
cua-stream's venv cannot hold): ``worker`` (the Megatron backend's worker process) and ``megatron_cpu``
(megatron-bridge without Transformer Engine). They import torch, transformers and megatron only.

The worker is started by its file, ``python worker.py --serve``, not ``python -m``: a module run needs
cua-stream's install on the path, and with it cua-stream's transformers ahead of megatron-bridge's pin.
Run by its file, the worker's own folder is the first entry of its path (how it imports ``megatron_cpu``),
so this folder holds no module whose name would shadow a library's. It lives in the package, not in
``scripts/``, so that an installed wheel holds it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

WORKER_MODULE = f"{__name__}.worker"


def worker_file() -> Path:
    """The worker's file, found as a module of the package (a checkout's or an installed wheel's)."""
    spec = importlib.util.find_spec(WORKER_MODULE)
    assert spec is not None and spec.origin is not None, WORKER_MODULE
    return Path(spec.origin)
