"""The ACL bindings in Redis (mapping/security/acl_store.py): one canonical member per
binding, idempotent creation, deletion by filter answering what it removed, a change notice
after each change; and the authorizer's copy of them following the notices
(adapter/authorizer.py) against a real redis-server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import redis
from redis.asyncio import Redis

from adapter.authorizer import Authorizer
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.pubsub import Subscriber
from mapping.core.keys import Keys
from mapping.security.acl_store import AclStore, SyncAclStore, decode, encode
from mapping.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tests.support.waiting import wait_until_async

READ_ORDERS = AclBinding(
    ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", Operation.READ,
    Permission.ALLOW,
)  # fmt: skip
WRITE_ORD = AclBinding(
    ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:bob", "10.0.0.1", Operation.WRITE,
    Permission.DENY,
)  # fmt: skip
GROUP_G = AclBinding(
    ResourceType.GROUP, "g", PatternType.LITERAL, "User:alice", "*", Operation.READ,
    Permission.ALLOW,
)  # fmt: skip


def _run(redis_url: str, body: Callable[[AclStore, Keys, Redis], Awaitable[None]]) -> None:
    async def main() -> None:
        client = connect(redis_url, 5.0)
        keys = Keys(f"acls-{uuid.uuid4().hex[:8]}")
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            await body(AclStore(batcher, keys), keys, client)
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(main())


def test_a_binding_encodes_to_one_canonical_member() -> None:
    assert encode(READ_ORDERS) == '[2,3,"orders","User:alice","*",3,3]'
    assert decode(encode(WRITE_ORD)) == WRITE_ORD
    assert decode(b"not json") is None
    assert decode("[2,3,1]") is None


def test_create_is_idempotent_and_delete_answers_what_it_removed(redis_url: str) -> None:
    async def body(store: AclStore, keys: Keys, client: Redis) -> None:
        await store.create([READ_ORDERS, WRITE_ORD])
        await store.create([READ_ORDERS, GROUP_G])  # READ_ORDERS again: still one member
        assert await store.batcher.call("SCARD", keys.acls) == 3
        assert set(await store.load()) == {READ_ORDERS, WRITE_ORD, GROUP_G}
        topics = AclFilter(ResourceType.TOPIC)
        alice = AclFilter(principal="User:alice")
        deleted = await store.delete([topics, alice, AclFilter(ResourceType.CLUSTER)])
        assert set(deleted[0]) == {READ_ORDERS, WRITE_ORD}
        assert set(deleted[1]) == {READ_ORDERS, GROUP_G}  # each filter its matches
        assert deleted[2] == []
        assert await store.load() == []
        assert await store.delete([AclFilter()]) == [[]]

    _run(redis_url, body)


def test_every_change_is_announced(redis_url: str) -> None:
    async def body(store: AclStore, keys: Keys, client: Redis) -> None:
        notices: list[bytes] = []
        subscriber = Subscriber(client, keys.pod_channel("t"))
        listening = asyncio.create_task(subscriber.run())
        try:
            await subscriber.subscribe(keys.acls_changed_channel, notices.append)
            await store.create([READ_ORDERS])
            await wait_until_async(lambda: len(notices) == 1)
            await store.delete([AclFilter(ResourceType.TOPIC)])
            await wait_until_async(lambda: len(notices) == 2)
            await store.delete([AclFilter(ResourceType.TOPIC)])  # nothing removed: no notice
            await store.create([GROUP_G])
            await wait_until_async(lambda: len(notices) == 3)
        finally:
            listening.cancel()

    _run(redis_url, body)


def test_the_authorizer_follows_changes_made_elsewhere(redis_url: str) -> None:
    """A change made through the command line's store (another process, another pod) is in
    force in the authorizer once the notice arrived."""

    async def body(store: AclStore, keys: Keys, client: Redis) -> None:
        sync = SyncAclStore(redis.Redis.from_url(redis_url), keys)
        sync.create([READ_ORDERS])
        authorizer = Authorizer(store, enabled=True)
        subscriber = Subscriber(client, keys.pod_channel("t"))
        work = [asyncio.create_task(subscriber.run())]
        try:
            work.append(asyncio.create_task(authorizer.run(subscriber)))
            args = ("User:alice", "/127.0.0.1", Operation.READ, ResourceType.TOPIC, "orders")
            await wait_until_async(lambda: authorizer.allows(*args))
            assert not authorizer.allows("User:bob", *args[1:])
            assert sync.delete([AclFilter(principal="User:alice")]) == [[READ_ORDERS]]
            await wait_until_async(lambda: not authorizer.allows(*args))
            assert sync.create([READ_ORDERS, READ_ORDERS]) == 1
            await wait_until_async(lambda: authorizer.allows(*args))
        finally:
            for task in work:
                task.cancel()
            sync.client.close()

    _run(redis_url, body)
