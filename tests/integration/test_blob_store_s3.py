"""The S3-compatible blob store against a real object-store server (moto's server mode, started here as
its own process on a free port): the same content-hash, idempotence and corruption rules as the local
store, selected by URL; and the gateway and trainer both take an ``s3://`` location."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from cua_stream.blobs import S3BlobStore, open_blob_store, sha256_of
from cua_stream.errors import BlobCorrupted, BlobNotFound, BlobStoreUnavailable
from tests.conftest import free_port

pytestmark = [pytest.mark.slow]

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def object_store() -> Iterator[str]:
    """A moto S3 server in its own process; its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/moto-api/", timeout=2).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "moto server did not start"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def s3_env(object_store: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """boto3's own configuration chain pointed at the server (what a deployment sets)."""
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": object_store}.items():
        monkeypatch.setenv(name, value)
    return object_store


def bucket(name: str) -> str:
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def test_put_get_exists_are_content_addressed_and_idempotent(s3_env: str) -> None:
    store = open_blob_store(f"s3://{bucket('shots')}/run-1/screens")
    assert isinstance(store, S3BlobStore) and store.prefix == "run-1/screens/"
    data = b"\x89PNG fake screenshot bytes"
    digest = store.put(data)
    assert digest == sha256_of(data) and store.put(data) == digest  # the same bytes, the same name
    assert store.exists(digest) and store.get(digest) == data
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="shots")["Contents"]]
    assert keys == [f"run-1/screens/{digest[:2]}/{digest[2:4]}/{digest}"]
    missing = sha256_of(b"never stored")
    assert not store.exists(missing)
    with pytest.raises(BlobNotFound, match="is not in s3://shots/run-1/screens/"):
        store.get(missing)
    with pytest.raises(ValueError, match="not a sha256"):
        store.get("../../etc/passwd")


def test_a_tampered_object_is_refused_on_read(s3_env: str) -> None:
    store = open_blob_store(f"s3://{bucket('tamper')}/p")
    digest = store.put(b"the real screenshot")
    boto3.client("s3").put_object(Bucket="tamper", Key=store.key_of(digest), Body=b"something else")  # type: ignore[attr-defined]
    with pytest.raises(BlobCorrupted, match="does not hash to its name"):
        store.get(digest)


def test_a_missing_bucket_or_a_bad_url_fails_at_start(s3_env: str) -> None:
    with pytest.raises(BlobStoreUnavailable, match="s3://no-such-bucket/"):
        open_blob_store("s3://no-such-bucket/x")
    with pytest.raises(ValueError, match="expected s3://bucket/prefix"):
        open_blob_store("s3:///prefix-only")


def test_the_trainer_and_the_gateway_read_one_s3_location(s3_env: str, tmp_path: Path) -> None:
    """The trainer's setting keeps the URL whole (a Path would fold its ``//``), so both daemons open the
    same bucket; what one stores the other reads."""
    from consumers.trainer.config import TrainerConfig

    bucket("shared")
    (tmp_path / "config.json").write_text("{}")
    config = TrainerConfig(run_id="r", model_path=str(tmp_path), blob_dir="s3://shared/screens")
    assert config.blobs == "s3://shared/screens"
    writer, reader = open_blob_store(config.blobs), open_blob_store("s3://shared/screens")
    assert reader.get(writer.put(b"one frame")) == b"one frame"
    assert os.environ["AWS_ENDPOINT_URL"] == s3_env
