"""Several "pods" on one Redis for the Kafka group tests: each a ``KafkaGroups`` with its own
Redis connection, batcher and pub/sub ``Subscriber``, as separate pods have."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from redis.asyncio import Redis

from adapter.pod import build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core import kafka_errors as errors
from mapping.core.keys import Keys
from mapping.group.groups import Groups
from mapping.kafka_group import JoinResult, KafkaGroups, KafkaGroupSettings
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics

# Short timeouts keep the tests fast; sessions far longer than any test step unless a test
# is about expiry. The initial delay lets members a test starts together form generation 1.
TEST_SETTINGS = KafkaGroupSettings(initial_rebalance_delay_ms=200, min_session_timeout_ms=100)
V1_SESSION_MS = 10_000
LONG_SESSION_MS = 60_000


@dataclass
class TestPod:
    groups: KafkaGroups
    topics: Topics
    v1: Groups
    client: Redis


@asynccontextmanager
async def pods(
    redis_url: str, count: int, settings: KafkaGroupSettings = TEST_SETTINGS
) -> AsyncIterator[list[TestPod]]:
    pod_settings = Settings(
        key_prefix=f"kg-{uuid.uuid4().hex[:8]}",
        sequence_bits=10,
        topic_defaults=TopicDefaults(3, 1, 1),
        kafka_groups=settings,
        session_timeout_ms=V1_SESSION_MS,
    )
    started: list[TestPod] = []
    tasks: list[asyncio.Task] = []
    try:
        for n in range(count):
            client = connect(redis_url, 5.0)
            await pin_sequence_bits(client, Keys(pod_settings.key_prefix), 10)
            pod = build_pod(pod_settings, client, pod_id=f"test-pod-{n}")
            # only what groups need: no replicator, no retention
            tasks += [
                asyncio.create_task(pod.batcher.run()),
                asyncio.create_task(pod.subscriber.run()),
            ]
            started.append(TestPod(pod.kafka_groups, pod.topics, pod.groups, client))
        yield started
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pod in started:
            await pod.client.aclose()


def subscription(*topics: str, owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription (what Kafka consumers send as JoinGroup metadata): v0,
    or v1 with the ``owned`` partitions."""
    version = 0 if owned is None else 1
    body = bytearray(version.to_bytes(2, "big")) + len(topics).to_bytes(4, "big")
    for topic in topics:
        body += len(topic).to_bytes(2, "big") + topic.encode()
    body += b"\xff\xff\xff\xff"  # no user data
    if owned is not None:
        body += len(owned).to_bytes(4, "big")
        for topic, partitions in owned.items():
            body += len(topic).to_bytes(2, "big") + topic.encode()
            body += len(partitions).to_bytes(4, "big")
            body += b"".join(p.to_bytes(4, "big") for p in partitions)
    return bytes(body)


async def join(
    groups: KafkaGroups,
    group: str,
    *,
    member_id: str = "",
    instance_id: str | None = None,
    session_ms: int = LONG_SESSION_MS,
    rebalance_ms: int = 10_000,
    protocols: list[tuple[str, bytes]] | None = None,
    client_id: str = "test-client",
) -> JoinResult:
    """A consumer's join, with the MEMBER_ID_REQUIRED round trip a v4+ client makes."""
    for _ in range(2):
        result = await groups.join(
            group,
            member_id,
            protocol_type="consumer",
            protocols=protocols or [("range", subscription("t"))],
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            group_instance_id=instance_id,
            client_id=client_id,
        )
        if result.error != errors.MEMBER_ID_REQUIRED:
            return result
        member_id = result.member_id
    raise AssertionError("MEMBER_ID_REQUIRED twice")
