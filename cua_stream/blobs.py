"""Content-addressed blob storage for screenshots (claim-check): events carry the sha256, never the bytes.

A GRPO group shares its first frame and unchanged screens repeat, so storing by content hash also
deduplicates. Two backends, chosen by location (``open_blob_store``): a directory, or an S3-compatible
bucket (``s3://bucket/prefix``) for deployments on several hosts. The local store lays blobs out as ``<root>/<h[:2]>/<h[2:4]>/<h>`` and writes atomically
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

from cua_stream.errors import BlobCorrupted, BlobNotFound, BlobStoreUnavailable

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


class S3BlobStore:
    """Blobs in an S3-compatible object store (AWS, MinIO, Ceph, ...): every host of a deployment reads the
    same screenshots. Keys are ``<prefix><h[:2]>/<h[2:4]>/<h>``; an object's bytes are checked against its
    name on read, as on disk. The endpoint and credentials come from boto3's own chain (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ... or a profile); ``client`` overrides it."""

    def __init__(
        self, bucket: str, prefix: str = "", *, client: object = None, verify_on_read: bool = True
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.verify_on_read = verify_on_read
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=bucket)  # type: ignore[attr-defined]
        except (ClientError, BotoCoreError) as e:
            raise BlobStoreUnavailable(f"blob store s3://{bucket}/{self.prefix}: {e}") from None

    def key_of(self, sha256: str) -> str:
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return f"{self.prefix}{sha256[:2]}/{sha256[2:4]}/{sha256}"

    def put(self, data: bytes) -> str:
        digest = sha256_of(data)
        if not self.exists(digest):  # an object is written whole or not at all: no temp-and-rename
            self.client.put_object(Bucket=self.bucket, Key=self.key_of(digest), Body=data)  # type: ignore[attr-defined]
        return digest

    def get(self, sha256: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key_of(sha256))  # type: ignore[attr-defined]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise BlobNotFound(f"blob {sha256} is not in s3://{self.bucket}/{self.prefix}") from None
            raise
        data = reply["Body"].read()
        if self.verify_on_read and sha256_of(data) != sha256:
            raise BlobCorrupted(f"blob s3://{self.bucket}/{self.key_of(sha256)} does not hash to its name")
        return data

    def exists(self, sha256: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key_of(sha256))  # type: ignore[attr-defined]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return False
            raise
        return True


def open_blob_store(location: str | Path) -> BlobStore:
    """The blob store at ``location``: ``s3://bucket/prefix`` (every host sees it) or a directory."""
    text = str(location)
    if text.startswith("s3://"):
        bucket, _, prefix = text.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"blob store {text!r}: expected s3://bucket/prefix")
        return S3BlobStore(bucket, prefix)
    return LocalBlobStore(text)
