"""The Kafka broker's jars: a pinned lock file (group, artifact, version, sha256) per Kafka version,
downloaded once from Maven Central into the user cache and verified by hash.

Why a lock file rather than running Maven at start: a fresh machine needs no Maven, every start uses the
exact jars we tested, and a tampered or truncated download is caught by its hash. ``write_lock`` (behind
``cua-stream broker lock``) regenerates a lock with Maven when we move to a new Kafka version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cua_stream.errors import BrokerError

DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2"
LOG4J_VERSION = "2.24.3"


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        return f"{repository.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"


def lock_path(kafka_version: str) -> Path:
    return Path(str(resources.files("cua_stream.broker").joinpath(f"kafka-{kafka_version}.lock")))


def locked_versions() -> list[str]:
    folder = Path(str(resources.files("cua_stream.broker")))
    return sorted(p.name[len("kafka-") : -len(".lock")] for p in folder.glob("kafka-*.lock"))


def read_lock(kafka_version: str) -> list[Artifact]:
    path = lock_path(kafka_version)
    if not path.exists():
        raise BrokerError(
            f"no jar lock for Kafka {kafka_version}; locked versions: {', '.join(locked_versions())}. "
            f"Create one with: cua-stream broker lock --kafka-version {kafka_version} (needs Maven)"
        )
    artifacts = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            group, artifact, version, sha256 = line.split("\t")
            artifacts.append(Artifact(group, artifact, version, sha256))
    return artifacts


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_jars(kafka_version: str, libs_dir: Path, repository: str = DEFAULT_REPOSITORY) -> list[Path]:
    """Every jar of the lock present and verified in ``libs_dir``; downloads what is missing."""
    libs_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for art in read_lock(kafka_version):
        target = libs_dir / art.filename
        if not (target.exists() and _sha256_file(target) == art.sha256):
            _download(art, target, repository)
        paths.append(target)
    return paths


def _download(art: Artifact, target: Path, repository: str) -> None:
    url = art.url(repository)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
            shutil.copyfileobj(resp, out)
        got = _sha256_file(Path(tmp))
        if got != art.sha256:
            raise BrokerError(
                f"{url}: sha256 {got} does not match the lock ({art.sha256}); refusing to use it"
            )
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError) as e:
        raise BrokerError(
            f"cannot download {url}: {e}. The local broker needs Maven Central (or a mirror: set "
            f"CUA_BROKER_MAVEN_REPOSITORY) once; later starts use the cache."
        ) from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_lock(kafka_version: str, out: Path) -> Path:
    """Resolve kafka_2.13 ``kafka_version`` + log4j's slf4j binding with Maven and write a lock file."""
    if shutil.which("mvn") is None:
        raise BrokerError("writing a lock needs Maven (mvn) on PATH")
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(kafka=kafka_version, log4j=LOG4J_VERSION))
        listing = Path(work) / "deps.txt"
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:list", "-DincludeScope=runtime",
             f"-DoutputFile={listing}", "-DoutputAbsoluteArtifactFilename=true"],
            check=True,
        )  # fmt: skip
        rows = []
        for line in listing.read_text().splitlines():
            parts = line.strip().split(":")
            if len(parts) >= 6 and parts[2] == "jar":
                group, artifact, _, version, _scope, path = parts[:6]
                rows.append(f"{group}\t{artifact}\t{version}\t{_sha256_file(Path(path))}")
    out.write_text(
        f"# Apache Kafka {kafka_version} broker runtime (org.apache.kafka:kafka_2.13 + log4j-slf4j-impl), "
        "resolved from Maven Central.\n# group\tartifact\tversion\tsha256\n" + "\n".join(sorted(rows)) + "\n"
    )
    return out


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.cua-stream</groupId><artifactId>kafka-lock</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""
