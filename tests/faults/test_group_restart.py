"""Group state and committed offsets survive restarts of every pod and, with AOF, of Redis."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from mapping.connection.embedded import RedisProcess
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

# Long sessions: the restart must not look like members going silent.
LONG_SESSION = ("--session-timeout-ms", "600000")


def test_group_survives_pod_and_redis_restart(
    start_pod: Callable[..., Pod], own_redis: RedisProcess, topic: str
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = start_pod(own_redis.url, *RF1, *LONG_SESSION)
    with first.client() as client:
        client.join(group, topic, "a", assignor="range")
        assert client.join(group, topic, "b").assigned == [2]
        client.commit(group, topic, "a", 2, 1, 1234)
        client.commit(group, topic, "b", 2, 2, 99)
    first.kill()
    own_redis.stop()  # SIGTERM: Redis writes its AOF
    own_redis.start()  # and loads it back
    second = start_pod(own_redis.url, *RF1, *LONG_SESSION)
    with second.client() as client:

        def synced() -> bool:
            reply = client.request("SYNC", f"{group} {topic} a 2")
            return reply.ok

        wait_until(synced, timeout=30)
        a = client.sync(group, topic, "a", 2)
        assert (a.generation, a.assigned) == (2, [0, 1])
        assert client.sync(group, topic, "b", 2).assigned == [2]
        assert [client.committed(group, topic, p) for p in range(3)] == [0, 1234, 99]
        # The group carries on where it was: range is still its assignor.
        assert client.join(group, topic, "c").generation == 3
        assert client.sync(group, topic, "c", 3).assigned == [2]
