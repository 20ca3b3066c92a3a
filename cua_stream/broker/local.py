"""A single-node Apache Kafka broker in KRaft mode (broker + controller in one JVM), run from jars.

Layout under ``home`` (the "known place"): ``server.properties``, ``log4j2.properties``, ``cluster-id``,
``data/`` (the log directories), ``logs/server.log`` (broker log), ``logs/stdout.log`` and ``broker.pid``;
a secured broker (``secure``) adds ``tls/`` (its CA and certificate) and ``secrets/<role>.password``.
The jars live in the user cache (``<cache>/kafka/<version>/libs``) so a second start, or a second home,
reuses them.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import msgspec

from cua_stream.broker.jars import DEFAULT_REPOSITORY, ensure_jars
from cua_stream.broker.tls import BROKER_CN, ensure_tls, tls_files
from cua_stream.broker.users import MECHANISM, ensure_passwords, password_file, scram_arguments, write_private
from cua_stream.bus.acl import ADMIN
from cua_stream.config import cache_dir, state_dir
from cua_stream.errors import BrokerError, PortInUse
from cua_stream.procs import pid_alive

MIN_JAVA = 17


class BrokerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The local broker (env CUA_BROKER_<FIELD>)."""

    home: str = ""
    """State directory (config, data, logs, pid). Empty: <CUA_HOME or user state dir>/broker."""
    host: str = "127.0.0.1"
    """The address the local broker's listeners bind and advertise."""
    port: int = 9092
    """Client listener (PLAINTEXT; SASL_SSL when ``secure``)."""
    secure: bool = False
    """SASL_SSL (SCRAM-SHA-512 over TLS) on the client port, one user per role, and the ACL authorizer
    (env CUA_BROKER_SECURE). A home keeps the mode it was formatted with (``--fresh`` to change it)."""
    controller_port: int = 0
    """KRaft controller listener; 0 means port + 1."""
    kafka_version: str = "4.1.1"
    """The Apache Kafka release to run; its jars come from the lock file of that version (`cua-stream broker
    lock`)."""
    heap_mb: int = 512
    """The broker JVM's maximum heap (-Xmx), in MiB; at least 128."""
    java: str = "java"
    """The java executable that runs the broker (Java 17 or later)."""
    maven_repository: str = DEFAULT_REPOSITORY
    """Where the broker's jars are downloaded from (then checked against the lock's hashes and cached)."""
    start_timeout_s: float = 90.0
    """How long `broker start` waits for the broker to answer before it gives up, naming its log."""

    def __post_init__(self) -> None:
        for name in ("port", "controller_port"):
            value = getattr(self, name)
            if not (0 <= value < 65536) or (name == "port" and value == 0):
                raise ValueError(f"broker.{name}: {value} is not a usable TCP port")
        if self.heap_mb < 128:
            raise ValueError("broker.heap_mb: at least 128 MiB")

    @property
    def home_dir(self) -> Path:
        return Path(self.home) if self.home else state_dir() / "broker"

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def controller(self) -> int:
        return self.controller_port or self.port + 1


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap_servers: str
    home: Path
    log: Path
    secure: bool = False

    def describe(self) -> str:
        state = f"running (pid {self.pid})" if self.running else "stopped"
        how = " (SASL_SSL, SCRAM-SHA-512)" if self.secure else ""
        return f"Kafka broker {state} at {self.bootstrap_servers}{how}; home {self.home}; log {self.log}"


def new_cluster_id() -> str:
    """A random KRaft cluster id (a UUID, URL-safe base64 without padding, as Kafka's own). Never one
    starting with '-': Kafka avoids those too, since a tool would take one for an option (1 in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class LocalBroker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.home = config.home_dir
        self.pid_file = self.home / "broker.pid"
        self.log = self.home / "logs" / "server.log"
        self.formatted_secure = self.home / "secrets" / "formatted"
        """Written once the storage was formatted with the users (a plain home has none)."""
        self._proc: subprocess.Popen[bytes] | None = None  # held so the child is reaped, not leaked

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self, *, fresh: bool = False) -> BrokerStatus:
        """Start the broker (or return the running one); wait until it accepts Kafka requests."""
        status = self.status()
        if status.running:
            if fresh:
                self.stop()
            else:
                return status
        java_version(self.config.java)
        if _port_open(self.config.host, self.config.port):
            raise PortInUse(f"{self.config.bootstrap_servers} is already in use by another process")
        libs = cache_dir() / "kafka" / self.config.kafka_version / "libs"
        ensure_jars(self.config.kafka_version, libs, self.config.maven_repository)
        if fresh and (self.home / "data").exists():
            shutil.rmtree(self.home / "data")
            self.formatted_secure.unlink(missing_ok=True)
        self._write_configs()
        if not (self.home / "data" / "meta.properties").exists():
            self._format(libs)
        elif self.config.secure and not self.formatted_secure.exists():
            raise BrokerError(
                f"{self.home} was formatted without --secure, so its storage has no users; "
                "start it with --fresh to format it again (its topics are lost), or use another --home"
            )
        log_offset = self.log.stat().st_size if self.log.exists() else 0
        self._spawn(libs)
        self._wait_ready(log_offset)
        return self.status()

    def stop(self, timeout_s: float = 60.0) -> BrokerStatus:
        """Stop cleanly (SIGTERM: controlled shutdown, logs flushed); SIGKILL only after ``timeout_s``."""
        pid = self._pid()
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                while pid_alive(pid):
                    time.sleep(0.1)
        if self._proc is not None:
            self._proc.wait()
            self._proc = None
        self.pid_file.unlink(missing_ok=True)
        return self.status()

    def status(self) -> BrokerStatus:
        pid = self._pid()
        running = pid is not None and pid_alive(pid)
        bootstrap, secure = self._listener()
        return BrokerStatus(running, pid if running else None, bootstrap, self.home, self.log, secure)

    def _listener(self) -> tuple[str, bool]:
        # The address (and mode) this home's broker was started with (a later `stop` may not repeat --port).
        props = self.home / "server.properties"
        if props.exists():
            text = props.read_text()
            m = re.search(r"^advertised\.listeners=(PLAINTEXT|SASL_SSL)://(\S+)$", text, re.MULTILINE)
            if m:
                return m.group(2), m.group(1) == "SASL_SSL"
        return self.config.bootstrap_servers, self.config.secure

    def client_bus(self, role: str) -> dict[str, str]:
        """The bus settings (``BusConfig`` fields) of a client of this secured broker as ``role``."""
        return {
            "bootstrap_servers": self.config.bootstrap_servers,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM,
            "sasl_username": role,
            "sasl_password_file": str(password_file(self.home, role)),
            "ssl_cafile": str(tls_files(self.home).ca),
        }

    # -- steps --------------------------------------------------------------------------------------

    def _write_configs(self) -> None:
        c = self.config
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        common = _COMMON_PROPERTIES.format(host=c.host, controller=c.controller, data=self.home / "data")
        if c.secure:
            tls = ensure_tls(self.home, c.host)
            admin = ensure_passwords(self.home)[ADMIN]
            listeners = _SECURE_LISTENERS.format(
                host=c.host, port=c.port, controller=c.controller, admin=ADMIN, admin_password=admin,
                keystore=tls.keystore, ca=tls.ca, broker_cn=BROKER_CN,
            )  # fmt: skip
            # 0600: it holds the admin password (the broker's own inter-broker login)
            write_private(self.home / "server.properties", common + listeners)
        else:
            listeners = _PLAIN_LISTENERS.format(host=c.host, port=c.port, controller=c.controller)
            (self.home / "server.properties").write_text(common + listeners)
        (self.home / "log4j2.properties").write_text(_LOG4J2.format(log=self.log))

    def _java_cmd(self, libs: Path, main: str, *args: str) -> list[str]:
        return [
            self.config.java,
            f"-Xmx{self.config.heap_mb}m",
            f"-Xms{min(256, self.config.heap_mb)}m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            # Keep logging alive until Kafka's own shutdown hook has finished (its last lines matter).
            "-Dlog4j2.shutdownHookEnabled=false",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def _format(self, libs: Path) -> None:
        id_file = self.home / "cluster-id"
        if not id_file.exists():
            id_file.write_text(new_cluster_id())
        cmd = self._java_cmd(
            libs, "kafka.tools.StorageTool", "format", "--standalone", "--ignore-formatted",
            # one argument with '=': an id that starts with '-' is not read as an option
            f"--cluster-id={id_file.read_text().strip()}", "-c", str(self.home / "server.properties"),
        )  # fmt: skip
        if self.config.secure:
            cmd += scram_arguments(ensure_passwords(self.home))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise BrokerError(f"formatting the KRaft storage failed:\n{proc.stdout}{proc.stderr}")
        if self.config.secure:
            self.formatted_secure.write_text("SCRAM users created at format time\n")

    def _spawn(self, libs: Path) -> None:
        cmd = self._java_cmd(libs, "kafka.Kafka", str(self.home / "server.properties"))
        with (self.home / "logs" / "stdout.log").open("ab") as out:
            self._proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.pid_file.write_text(str(self._proc.pid))

    def _wait_ready(self, log_offset: int) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        pid = self._pid()
        while time.monotonic() < deadline:
            if pid is None or not pid_alive(pid):
                failure = self._failure(log_offset)
                error = PortInUse if "Address already in use" in failure else BrokerError
                raise error(f"the broker exited during start: {failure}")
            if _port_open(self.config.host, self.config.port) and self._log_says_started(log_offset):
                return
            time.sleep(0.25)
        raise BrokerError(
            f"the broker did not start within {self.config.start_timeout_s:.0f}s: {self._failure(log_offset)}"
        )

    def _log_says_started(self, log_offset: int) -> bool:
        # "Kafka Server started" is logged after the broker has registered with the controller and its
        # listeners accept requests; a bare TCP accept happens earlier than that. Only this run's part
        # of the log counts.
        try:
            with self.log.open("rb") as f:
                if os.fstat(f.fileno()).st_size < log_offset:
                    log_offset = 0  # rolled over
                f.seek(log_offset)
                return b"Kafka Server started" in f.read()
        except FileNotFoundError:
            return False

    def _failure(self, log_offset: int) -> str:
        """Why this start failed, from this run's part of the log: its ERROR/FATAL lines and their causes
        (the shutdown that follows a failed start logs pages of noise after them), else the log's tail."""
        try:
            with self.log.open("rb") as f:
                f.seek(log_offset if os.fstat(f.fileno()).st_size >= log_offset else 0)
                lines = f.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            lines = []
        causes = [
            line.strip()
            for line in lines
            if any(mark in line for mark in (" ERROR ", " FATAL ", "Caused by:", "Exception:"))
        ]
        unique = list(dict.fromkeys(causes))[:6]
        shown = "\n".join(unique) if unique else self._log_tail()
        return f"{shown}\n(full log: {self.log})"

    def _log_tail(self, n: int = 30) -> str:
        for path in (self.log, self.home / "logs" / "stdout.log"):
            if path.exists() and path.stat().st_size:
                return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
        return "(no log output)"

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None


def java_version(java: str = "java") -> int:
    """The major version of ``java``; BrokerError if missing or older than 17 (Kafka 4 needs 17+)."""
    exe = shutil.which(java)
    if exe is None:
        raise BrokerError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker and {java!r} is not on PATH. "
            "Install a JDK (e.g. `apt-get install openjdk-17-jre-headless`) or set CUA_BROKER_JAVA."
        )
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise BrokerError(f"cannot read the Java version from `{exe} -version`: {out.strip()!r}")
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    if major < MIN_JAVA:
        raise BrokerError(f"Kafka 4 needs Java {MIN_JAVA}+; {exe} is Java {major}. Install a newer JDK.")
    return major


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (``ip_local_port_range``): a port
    in it can be handed to any client's socket while its listener is down, so a daemon that restarts on
    it may find it taken."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


_COMMON_PROPERTIES = """\
# Written by cua-stream: a single-node KRaft broker (broker and controller in one process).
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers={host}:{controller}
controller.listener.names=CONTROLLER
log.dirs={data}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=8388608
log.retention.check.interval.ms=60000
"""

_PLAIN_LISTENERS = """\
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller}
advertised.listeners=PLAINTEXT://{host}:{port}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
"""

# Secured: clients (and the broker itself, for its transaction markers, as the admin user) use SASL_SSL
# with SCRAM; the controller listener is TLS with client certificates, where the broker presents its own
# certificate (Kafka offers no SCRAM on KRaft controller listeners, and a PLAINTEXT one would have to
# make User:ANONYMOUS a super user for the broker's own registration: any local process could then
# administer the cluster). Everything not granted by an ACL is refused.
_SECURE_LISTENERS = """\
listeners=SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller}
advertised.listeners=SASL_SSL://{host}:{port}
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\
  required username="{admin}" password="{admin_password}";
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{admin};User:CN={broker_cn}
allow.everyone.if.no.acl.found=false
"""

_LOG4J2 = """\
# Written by cua-stream.
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
appender.file.type=RollingFile
appender.file.name=file
appender.file.fileName={log}
appender.file.filePattern={log}.%i
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
appender.file.policies.type=Policies
appender.file.policies.size.type=SizeBasedTriggeringPolicy
appender.file.policies.size.size=50MB
appender.file.strategy.type=DefaultRolloverStrategy
appender.file.strategy.max=3
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.apache.name=org.apache.kafka
logger.apache.level=INFO
"""
