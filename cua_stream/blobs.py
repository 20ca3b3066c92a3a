"""Content-addressed blob storage for screenshots (claim-check): events carry the sha256, never the bytes.

A GRPO group shares its first frame and unchanged screens repeat, so storing by content hash also
deduplicates. The local store lays blobs out as ``<root>/<h[:2]>/<h[2:4]>/<h>`` and writes atomically
(temp file + rename), so a reader never sees a partial blob and concurrent writers of the same bytes
agree.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol

from cua_stream.errors import BlobCorrupted, BlobNotFound

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store ``data``; return its sha256 (hex). Idempotent."""
        ...

    def get(self, sha256: str) -> bytes:
        """The bytes named ``sha256``; raises BlobNotFound."""
        ...

    def exists(self, sha256: str) -> bool: ...


class LocalBlobStore:
    """A directory of blobs. Safe for several processes on one machine (or a shared filesystem)."""

    def __init__(self, root: Path | str, *, verify_on_read: bool = True) -> None:
        self.root = Path(root)
        self.verify_on_read = verify_on_read
        self.root.mkdir(parents=True, exist_ok=True)

    def path_of(self, sha256: str) -> Path:
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def put(self, data: bytes) -> str:
        digest = sha256_of(data)
        path = self.path_of(digest)
        if path.exists():
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, sha256: str) -> bytes:
        path = self.path_of(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(f"blob {sha256} is not in {self.root}") from None
        if self.verify_on_read and sha256_of(data) != sha256:
            raise BlobCorrupted(f"blob {path} does not hash to its name")
        return data

    def exists(self, sha256: str) -> bool:
        return self.path_of(sha256).exists()
