"""A chaos run: the whole loop as separate processes, a seeded schedule of faults applied to them while the
trainer trains, then the invariants checked from the topics.

The loop: a local broker, the engine (tiny Qwen3-VL), the gateway, the scorer, ``producers`` producers and
the trainer (which is also the feeder). A watchdog restarts any daemon that exits without being asked to
(a real supervisor would; each such exit is reported, since a daemon that crashes on its own under faults
is a finding even when nothing is lost). The trainer has no step limit: the run stops it once it has
taken its steps and the whole schedule has been applied and healed (a soak: once its time is up), so what
the run does never depends on how fast the machine trains. Then every held daemon is brought back, and
the run waits until every work request has an outcome and every outcome's episode a score before it
stops the daemons and reads the topics.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable

import anyio
import httpx
import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from cua_stream.app.chaos import loop
from cua_stream.app.chaos.config import ChaosConfig
from cua_stream.app.chaos.daemons import Daemon
from cua_stream.app.chaos.evidence import files_under, listeners, read_run
from cua_stream.app.chaos.fault_schedule import BROKER, Action, Fault, plan
from cua_stream.app.chaos.invariants import check_all
from cua_stream.app.chaos.report import Applied, ChaosReport
from cua_stream.app.chaos.resource_usage import Sampler
from cua_stream.auth import bearer_headers
from cua_stream.broker import BrokerConfig, LocalBroker, ephemeral_range
from cua_stream.bus.acl import ADMIN, acls
from cua_stream.bus.admin import TopicAdmin
from cua_stream.bus.connect import client_security
from cua_stream.bus.reader import scan
from cua_stream.config import BusConfig, ConfigError, convert, env_names
from cua_stream.errors import DaemonDidNotStart, PortInUse
from cua_stream.events import Discard, TrainStep
from cua_stream.topics import OUTCOMES, SCORES, TRAIN_STEPS, WORK

Emit = Callable[[str], None]
PORT_RETRY_S = 60.0
"""How long a restarting broker waits for its port to be free again before the run gives up."""


class BrokerTarget:
    """The broker as a fault target: stopped (or SIGKILLed) and started on the same data."""

    def __init__(self, broker: LocalBroker) -> None:
        self.broker, self.lock = broker, anyio.Lock()

    async def restart(self, hold_s: float, hard: bool) -> None:
        pid = self.broker.status().pid
        if hard and pid is not None:
            os.kill(pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(self.broker.stop)  # reaps it, clears the pid file
        else:
            await anyio.to_thread.run_sync(self.broker.stop)
        await anyio.sleep(hold_s)
        await self._start()

    async def _start(self) -> None:
        """Start on its port; while the port is taken (a client's outgoing socket can hold it for a moment,
        or a self-connect while the broker was down), wait and try again, up to ``PORT_RETRY_S``."""
        deadline = time.monotonic() + PORT_RETRY_S
        while True:
            try:
                await anyio.to_thread.run_sync(self.broker.start)
                return
            except PortInUse:
                await anyio.to_thread.run_sync(self.broker.stop)  # reaps a failed start
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(1.0)


class Chaos:
    def __init__(self, cfg: ChaosConfig, emit: Emit) -> None:
        self.cfg, self.emit = cfg, emit
        self.run_id = cfg.run_id
        self.home = cfg.home_for(self.run_id)
        self.t0 = time.monotonic()
        self.applied: list[Applied] = []
        self.skipped: list[Fault] = []
        self.healed = 0
        """Faults applied and over: the target is back (or could not be brought back, which the watchdog
        and the checks report), the pause ended, the poison record written."""
        self.trainer_done = anyio.Event()
        self.trainer_stopping = False
        """The run asked the trainer to stop: its exit, whatever its code, ends the run."""
        self.stop_faults = anyio.Event()
        """Set when the run is ending: faults not yet applied are skipped; those in hand heal."""
        self.daemons: dict[str, Daemon] = {}
        self.pages: dict[str, bytes] = {}
        self.sampler: Sampler | None = None
        self.keys = loop.Keys()
        self.exposure: list[str] = []
        """Security findings taken while the loop runs: a listener beyond loopback, an admin route that
        let a non-admin caller in."""

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def run(self) -> ChaosReport:
        cfg, home = self.cfg, self.home
        if home.exists() and any(home.iterdir()):
            raise ConfigError(
                f"chaos.home: {home} is not empty (an earlier run's?); remove it or choose another"
            )
        ports, (low, high) = loop.ports(cfg), ephemeral_range()
        if clash := loop.ephemeral_clash(ports, (low, high)):
            raise ConfigError(
                f"chaos.base_port: {cfg.base_port} puts port {clash} inside the kernel's ephemeral range "
                f"{low}-{high} (an outgoing connection can take it while its daemon restarts); choose a "
                f"base port below {low - (max(ports) - cfg.base_port)}"
            )
        home.mkdir(parents=True, exist_ok=True)
        broker = LocalBroker(BrokerConfig(home=str(home / "broker"), port=cfg.base_port, secure=cfg.secure))
        secured = " (SASL_SSL, a principal per daemon)" if cfg.secure else ""
        self.emit(f"run {self.run_id}: broker{secured}, topics, tiny model (under {home})")
        self.broker = BrokerTarget(broker)
        self.bus = BusConfig(bootstrap_servers=broker.config.bootstrap_servers, topic_prefix=self.run_id)
        try:
            await anyio.to_thread.run_sync(lambda: broker.start(fresh=True))
            if cfg.secure:  # the run itself (topics, ACLs, sampling, the checks) is the admin
                self.bus = convert(
                    BusConfig, "bus", {**broker.client_bus(ADMIN), "topic_prefix": self.run_id}
                )
            await self._start_loop()
            await self._faults_until_trained()
            wall = self.now()
            with anyio.CancelScope(shield=True):
                await self._stop_daemons()
            files = files_under(home / "logs", home / "trials", home / "trainer")
            log = await read_run(self.bus, self.run_id, files=files, pages=self.pages, exposure=self.exposure)
        finally:
            with anyio.CancelScope(shield=True):  # Ctrl-C or SIGTERM: nothing is left running
                await self._stop_daemons()
                await anyio.to_thread.run_sync(broker.stop)
        return ChaosReport(
            run_id=self.run_id,
            home=home,
            applied=self.applied,
            skipped=self.skipped,
            checks=check_all(log, max_in_flight=(cfg.max_staleness + 1) * cfg.groups_per_step),
            crashes={n: d.crashes for n, d in self.daemons.items()},
            starts={n: d.starts for n, d in self.daemons.items()},
            wall_s=wall,
            steps=len(log.steps),
            episodes=len({w.episode_id for w in log.work}),
            points=self.sampler.points if self.sampler else [],
            soak=cfg.duration_s > 0,
            principals={
                n: d.env[env_names("bus", "sasl_username")[0]] for n, d in self.daemons.items() if d.env
            },
            discards=dict(Counter(s.verdict.reason for s in log.scores if isinstance(s.verdict, Discard))),
            drops=dict(Counter(d.reason for d in log.drops)),
        )

    async def _start_loop(self) -> None:
        from cua_stream.app.demo import tiny_model_dir

        async with TopicAdmin(self.bus) as admin:
            await admin.create()
            if self.cfg.secure:
                await admin.create_acls(acls(self.run_id))
        model = await anyio.to_thread.run_sync(tiny_model_dir)
        config_file = self.home / "chaos.yaml"
        settings = loop.settings(self.cfg, self.run_id, self.home, model, self.bus, self.keys)
        config_file.touch(mode=0o600)  # it holds the run's keys: readable by this user only
        config_file.write_text(yaml.safe_dump(settings))
        broker = self.broker.broker
        principals = (
            {role: loop.principal_env(broker.client_bus(role)) for role in loop.DAEMON_ROLES}
            if self.cfg.secure else None
        )  # fmt: skip
        self.daemons = loop.daemons(self.cfg, self.home, model, config_file, principals)
        for d in self.daemons.values():
            d.start()
        for d in self.daemons.values():
            if not await d.ready():
                raise DaemonDidNotStart(f"{d.name} did not start: see {d.log}")

    async def _faults_until_trained(self) -> None:
        """Apply the schedule until the trainer has taken its steps; heal; wait for every answer."""
        cfg = self.cfg
        self.emit(f"all {len(self.daemons)} daemons ready; {cfg.faults} faults, one every ~{cfg.every_s}s")
        self.t0 = time.monotonic()
        faults = plan(cfg.seed, cfg.faults, every_s=cfg.every_s, producers=cfg.producers,
                      max_pause_s=cfg.max_pause_s)  # fmt: skip
        self.sampler = Sampler(self.bus, self.daemons, lambda: self.broker.broker.status().pid)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watchdog)
            tg.start_soon(self.sampler.run, cfg.sample_every_s, self.t0)
            if cfg.duration_s:
                tg.start_soon(self._end_after, cfg.duration_s)
            else:
                tg.start_soon(self._end_when_done, len(faults))
            async with anyio.create_task_group() as faulting:
                faulting.start_soon(self._inject, faults, faulting)
                await self.trainer_done.wait()
                self.stop_faults.set()
            self.emit(f"t+{self.now():.0f}s the trainer stopped; healing")
            for d in self.daemons.values():
                if d.name != "trainer" and not await d.ready():
                    self.emit(f"{d.name} is not ready after the faults (see {d.log})")
            await self._quiesce()
            self.pages = await self._metrics_pages()
            self.exposure = await self._exposure()
            tg.cancel_scope.cancel()

    async def _end_after(self, duration_s: float) -> None:
        """A soak's end: no more faults; the trainer stops after the step in hand (and exits 0)."""
        await anyio.sleep(duration_s)
        self.emit(f"t+{self.now():.0f}s {duration_s:.0f}s are up: stopping the trainer")
        self.stop_faults.set()
        await self._stop_trainer()

    async def _stop_trainer(self) -> None:
        """SIGTERM: the trainer stops after the step in hand and exits (the watchdog then ends the run)."""
        trainer = self.daemons["trainer"]
        async with trainer.lock:
            self.trainer_stopping = True
            trainer.signal(signal.SIGTERM)

    async def _end_when_done(self, faults: int) -> None:
        """A run of ``steps``: the trainer trains on (it has no step limit) until it has taken its steps
        and the whole schedule has been applied and healed; then it stops after the step in hand. So what
        the run did never depends on the machine's speed: a quick trainer does not cut the schedule short,
        a slow one still takes every step."""
        announced = False
        while self.healed < faults or await self._steps_taken() < self.cfg.steps:
            if self.healed == faults and not announced:
                self.emit(
                    f"t+{self.now():.0f}s all {faults} faults applied; training on to {self.cfg.steps} steps"
                )
                announced = True
            await anyio.sleep(1.0)
        self.emit(
            f"t+{self.now():.0f}s {self.cfg.steps} steps taken and every fault healed: stopping the trainer"
        )
        await self._stop_trainer()

    async def _steps_taken(self) -> int:
        """The steps the run's trainer has committed (its ``TrainStep`` records): what it did, whichever
        of its restarts did it."""
        with contextlib.suppress(KafkaError, OSError):  # the broker may be restarting: ask again later
            return len(
                {d.event.step async for d in scan(self.bus, TRAIN_STEPS) if isinstance(d.event, TrainStep)}
            )
        return 0

    async def _exposure(self) -> list[str]:
        """What a caller on the network, or a holder of a non-admin key, could reach."""
        found = [
            f"port {port} listens on {addr}"
            for addr, port in listeners(loop.ports(self.cfg))
            if addr != "127.0.0.1"
        ]
        port = self.cfg.base_port
        gateway, engine = f"http://127.0.0.1:{port + 11}", f"http://127.0.0.1:{port + 10}"
        probes = [
            (f"{gateway}/admin/drain", None), (f"{gateway}/admin/drain", self.keys.gateway),
            (f"{gateway}/admin/resume", self.keys.gateway),
            (f"{engine}/update_weights_from_disk", None), (f"{engine}/update_weights_from_disk", self.keys.engine),
            (f"{engine}/pause_generation", self.keys.engine),
        ]  # fmt: skip
        async with httpx.AsyncClient(timeout=10) as http:
            for url, key in probes:
                r = await http.post(url, json={}, headers=bearer_headers(key))
                if r.status_code != 401:
                    found.append(f"POST {url} with {'a non-admin key' if key else 'no key'}: {r.status_code}")
        return found

    async def _metrics_pages(self) -> dict[str, bytes]:
        """Every daemon's metrics page as the run ends (scanned for session keys)."""
        urls = {f"{d.name} {d.metrics_url}": d.metrics_url for d in self.daemons.values() if d.metrics_url}
        pages: dict[str, bytes] = {}
        async with httpx.AsyncClient(timeout=10) as http:
            for where, url in urls.items():
                with contextlib.suppress(httpx.HTTPError):  # the trainer has exited
                    pages[where] = (await http.get(url)).content
        return pages

    async def _stop_daemons(self) -> None:
        async with anyio.create_task_group() as tg:
            for d in self.daemons.values():
                tg.start_soon(d.stop)

    # -- faults ---------------------------------------------------------------------------------------

    async def _inject(self, faults: list[Fault], tg: anyio.abc.TaskGroup) -> None:
        for fault in faults:
            with anyio.move_on_after(max(0.0, fault.at_s - self.now())):
                await self.stop_faults.wait()
            if self.stop_faults.is_set():
                self.skipped.extend(f for f in faults if f.at_s >= fault.at_s)
                return
            tg.start_soon(self._apply, fault)

    async def _apply(self, fault: Fault) -> None:
        try:
            await self._apply_one(fault)
        finally:
            self.healed += 1

    async def _apply_one(self, fault: Fault) -> None:
        if fault.action is Action.POISON:
            await self._poison(fault)
            return
        if fault.target == BROKER:
            async with self.broker.lock:
                applied = self._record(fault)
                if applied is None:
                    return
                self.emit(fault.describe(self.now()))
                started = self.now()
                await self.broker.restart(fault.hold_s, fault.hard)
                applied.recovered_s = self.now() - started
            return
        d = self.daemons[fault.target]
        async with d.lock:
            applied = self._record(fault)
            if applied is None:
                return
            self.emit(fault.describe(self.now()))
            d.held = True
            if fault.action is Action.PAUSE:
                d.signal(signal.SIGSTOP)
                await anyio.sleep(fault.hold_s)
                d.signal(signal.SIGCONT)
                d.held = False
                return
            started = self.now()
            await d.kill()
            await anyio.sleep(fault.hold_s)
            d.start()
            d.held = False
            if await d.ready():
                applied.recovered_s = self.now() - started

    def _record(self, fault: Fault) -> Applied | None:
        if self.stop_faults.is_set():
            self.skipped.append(fault)
            return None
        applied = Applied(fault, self.now())
        self.applied.append(applied)
        return applied

    async def _poison(self, fault: Fault) -> None:
        """An undecodable record on the outcome topic (the scorer must dead-letter it)."""
        applied = self._record(fault)
        if applied is None:
            return
        self.emit(fault.describe(self.now()))
        topic = self.bus.topics().name_of(OUTCOMES)
        value = b"\xc1 not msgpack: chaos poison " + str(fault.at_s).encode()
        while True:
            raw = AIOKafkaProducer(
                bootstrap_servers=self.bus.bootstrap_servers,
                request_timeout_ms=10_000,
                **client_security(self.bus),
            )
            try:
                await raw.start()
                await raw.send_and_wait(topic, value, key=b"chaos-poison")
                return
            except (KafkaError, OSError):  # the broker may be down: try again until it is back
                await anyio.sleep(1.0)
            finally:
                await raw.stop()

    # -- supervision ----------------------------------------------------------------------------------

    async def _watchdog(self) -> None:
        while True:
            for d in self.daemons.values():
                if d.held or d.lock.locked() or (rc := d.exited()) is None:
                    continue
                if d.name == "trainer" and (rc == 0 or self.trainer_stopping):
                    if rc != 0:
                        d.crashes.append(rc)  # a stop that failed is still a finding
                    self.trainer_done.set()
                    continue
                d.crashes.append(rc)
                self.emit(f"t+{self.now():6.1f}s {d.name:<11} exited by itself (code {rc}); restarted")
                d.start()
            await anyio.sleep(0.5)

    async def _quiesce(self) -> None:
        """Wait until every work request has an outcome and every answered episode a score."""
        deadline = time.monotonic() + self.cfg.quiesce_timeout_s
        while time.monotonic() < deadline:
            issued = {d.event.episode_id async for d in scan(self.bus, WORK)}
            answered = {d.event.episode_id async for d in scan(self.bus, OUTCOMES)}
            scored = {d.event.episode_id async for d in scan(self.bus, SCORES)}
            if issued <= answered and answered <= scored:
                self.emit(f"t+{self.now():.0f}s all {len(issued)} requests answered and scored")
                return
            await anyio.sleep(2.0)
        self.emit("quiesce timed out: the checks below say what is missing")
