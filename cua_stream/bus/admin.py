"""Topic administration: create the registry's topics (idempotent) and describe them; grant ACLs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code
from aiokafka.protocol.admin import CreateAclsRequest

from cua_stream.bus.acl import ALLOW, DENY, OPERATION_CODES, PATTERN_CODES, RESOURCE_CODES, Acl
from cua_stream.bus.connect import client_security, start_client
from cua_stream.config import BusConfig
from cua_stream.topics import ALL, TopicSpec


@dataclass(frozen=True)
class TopicState:
    name: str
    spec: TopicSpec
    exists: bool
    partitions: int
    configs: dict[str, str]

    def drift(self, expected_partitions: int, expected_configs: dict[str, str]) -> list[str]:
        """Differences between the broker's topic and the registry (empty when they agree)."""
        if not self.exists:
            return ["missing"]
        out = []
        if self.partitions != expected_partitions:
            out.append(f"partitions {self.partitions} != {expected_partitions}")
        for k, v in expected_configs.items():
            if self.configs.get(k) != v:
                out.append(f"{k}={self.configs.get(k)!r} != {v!r}")
        return out


class TopicAdmin:
    def __init__(self, config: BusConfig) -> None:
        self.config = config
        self.topics = config.topics()
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=config.bootstrap_servers,
            client_id=f"{config.client_id}-admin",
            request_timeout_ms=config.request_timeout_ms,
            **client_security(config),
        )

    async def __aenter__(self) -> TopicAdmin:
        await start_client(self._admin.start, self.config, self._admin.close)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._admin.close()

    async def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The consumer group's committed offsets, by (topic, partition)."""
        offsets = await self._admin.list_consumer_group_offsets(group)
        return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items() if meta.offset >= 0}

    async def create(self, specs: tuple[TopicSpec, ...] = ALL) -> list[str]:
        """Create missing topics; return the names created (existing ones are left as they are)."""
        existing = set(await self._admin.list_topics())
        new = [
            NewTopic(
                self.topics.name_of(spec),
                self.topics.partitions_of(spec),
                self.topics.replication_factor,
                topic_configs=self.topics.configs_of(spec),
            )
            for spec in specs
            if self.topics.name_of(spec) not in existing
        ]
        if not new:
            return []
        created = []
        response = await self._admin.create_topics(new)
        for name, code, *_ in response.topic_errors:  # (topic, error_code, error_message)
            if code == 0:
                created.append(name)
            elif code != TopicAlreadyExistsError.errno:  # a concurrent creator won the race: fine
                raise RuntimeError(f"creating topic {name}: Kafka error code {code}")
        await self._wait_for_leaders([t.name for t in new])
        return created

    async def create_acls(self, acls: Sequence[Acl]) -> int:
        """Grant ``acls`` (idempotent: an ACL that exists already is left as it is); the count sent.

        aiokafka 0.14's admin client has no ACL call, but speaks Kafka's CreateAcls request (v1 and up:
        with pattern types), so the request is sent through it, one ACL per request."""
        for acl in acls:
            request = CreateAclsRequest(
                RESOURCE_CODES[acl.resource], acl.name, PATTERN_CODES[acl.pattern], acl.principal, "*",
                OPERATION_CODES[acl.operation], ALLOW if acl.allow else DENY,
            )  # fmt: skip
            response = await self._admin._send_request(request)
            for code, message in response.creation_responses:
                if code != 0:
                    raise RuntimeError(f"creating ACL {acl}: {for_code(code).__name__}: {message}")
        return len(acls)

    async def _wait_for_leaders(self, names: list[str], timeout_s: float = 30.0) -> None:
        """Return once every partition of ``names`` has a leader, so the first produce does not bounce
        off NotLeaderForPartition while the controller is still electing."""
        with anyio.fail_after(timeout_s):
            while True:
                described = await self._admin.describe_topics(names)
                if all(p["leader"] >= 0 for t in described for p in t["partitions"]) and all(
                    t["partitions"] for t in described
                ):
                    return
                await anyio.sleep(0.1)

    async def describe(self, specs: tuple[TopicSpec, ...] = ALL) -> list[TopicState]:
        names = {self.topics.name_of(s): s for s in specs}
        existing = set(await self._admin.list_topics())
        present = [n for n in names if n in existing]
        partitions: dict[str, int] = {}
        configs: dict[str, dict[str, str]] = {}
        if present:
            for t in await self._admin.describe_topics(present):
                partitions[t["topic"]] = len(t["partitions"])
            resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in present]
            for resp in await self._admin.describe_configs(resources):
                for _code, _msg, _type, rname, entries in resp.resources:
                    configs[rname] = {e[0]: e[1] for e in entries}
        return [
            TopicState(n, s, n in existing, partitions.get(n, 0), configs.get(n, {}))
            for n, s in names.items()
        ]
